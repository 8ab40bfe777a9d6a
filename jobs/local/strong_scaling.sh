#!/usr/bin/env bash
# jobs/slurm/strong_scaling.sbatch on one machine with plain mpirun: the same variables
# (DECK, RANK_LIST, SCHEDULES, POINTS, OVERRIDES, OUTPUT_DIR, SWEEP_NAME, LAUNCHER, PT_BIN;
# CPUS_PER_RANK), every point in turn, the same sweep directory, points.txt and table, and a
# log <LOG_DIR>/pt-scaling_<YYYYmmddHHMMSS>.out (LOG_DIR defaults to the current directory).
#
#   bash jobs/local/strong_scaling.sh
#   RANK_LIST="1 2" SCHEDULES="bsp 1f1b gpipe" OVERRIDES="train.max_steps=200" bash jobs/local/strong_scaling.sh
#   bash jobs/local/strong_scaling.sh --table runs/<sweep name>   # the table of a finished sweep
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = --table ]; then
  source "$here/../lib.sh"
  pt_scaling_table "${2:?usage: strong_scaling.sh --table SWEEP_DIR}/points.txt"
  exit
fi
script=$here/../slurm/strong_scaling.sbatch
unset SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_JOB_NAME
export LAUNCHER=${LAUNCHER:-mpirun} PT_REPO=${PT_REPO:-$(cd "$here/../.." && pwd)}
export PT_JOB_ID=${PT_JOB_ID:-$(date +%Y%m%d%H%M%S)}
log=${LOG_DIR:-.}/$(sed -n 's/^#SBATCH --job-name=//p' "$script")_$PT_JOB_ID.out
mkdir -p "$(dirname "$log")"
echo "log: $log"
exec > >(trap '' INT TERM; exec tee -a "$log") 2>&1
exec bash "$script" "$@"
