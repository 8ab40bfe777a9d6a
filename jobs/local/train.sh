#!/usr/bin/env bash
# jobs/slurm/train.sbatch on one machine with plain mpirun: the same variables (DECK, RANKS,
# OVERRIDES, OUTPUT_DIR, RUN_NAME, RESUME, LAUNCHER, PT_BIN; CPUS_PER_RANK instead of
# --cpus-per-task), the same run directory, and a log named like Slurm's %x_%j:
# <LOG_DIR>/pipetrain_<YYYYmmddHHMMSS>.out (LOG_DIR defaults to the current directory).
#
#   bash jobs/local/train.sh
#   DECK=input/fashion_cnn.toml RANKS=2 OVERRIDES="train.max_steps=100" bash jobs/local/train.sh
#
# Ctrl-C, SIGTERM or SIGUSR1 makes pipetrain checkpoint and stop (a second Ctrl-C kills the
# step); continue with the RESUME=... line it prints. More ranks than cores: oversubscribed,
# unbound (a note says so).
set -u
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../slurm/train.sbatch
# local means local: ignore a surrounding Slurm allocation (no srun, no resubmission)
unset SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_JOB_NAME
export LAUNCHER=${LAUNCHER:-mpirun} RANKS=${RANKS:-2} PT_REPO=${PT_REPO:-$(cd "$here/../.." && pwd)}
export PT_JOB_ID=${PT_JOB_ID:-$(date +%Y%m%d%H%M%S)}
log=${LOG_DIR:-.}/$(sed -n 's/^#SBATCH --job-name=//p' "$script")_$PT_JOB_ID.out
mkdir -p "$(dirname "$log")"
echo "log: $log"
exec > >(trap '' INT TERM; exec tee -a "$log") 2>&1
exec bash "$script" "$@"
