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
source "$here/../lib.sh"
if [ "${1:-}" = --table ]; then
  pt_scaling_table "${2:?usage: strong_scaling.sh --table SWEEP_DIR}/points.txt"
  exit
fi
pt_run_locally "$here/../slurm/strong_scaling.sbatch" "$@"
