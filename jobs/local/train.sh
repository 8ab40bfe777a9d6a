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
source "$here/../lib.sh"
export RANKS=${RANKS:-2}
pt_run_locally "$here/../slurm/train.sbatch" "$@"
