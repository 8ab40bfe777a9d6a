#!/usr/bin/env bash
# Time to accuracy, the PipeDream paper's metric: bsp, gpipe, 1f1b, pipedream, pipedream-vsync,
# 2bw and pipedream-nostash on the same deck and ranks (default: the CNN on 2 ranks, pipelines
# split at layer 3 with 4 microbatches, evaluation every 78 steps, target 0.88). Writes
# runs/bench_time_to_accuracy/{time_to_accuracy.csv, .md, .png} (accuracy against wall time).
# Options: tools/studies.py accuracy --help
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
exec /usr/bin/python3 tools/studies.py accuracy "$@"
