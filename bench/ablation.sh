#!/usr/bin/env bash
# The paper's ablation at this scale: model parallelism vs a straight pipeline vs the full
# plan vs data parallelism, same ranks, as speedup over one rank: measured on 2 ranks (REPS
# runs, steady-state steps), simulator predictions for 2-16 ranks from a profile taken here.
# Writes runs/bench_ablation/ablation.md. Options: tools/studies.py ablation --help
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
exec /usr/bin/python3 tools/studies.py ablation "$@"
