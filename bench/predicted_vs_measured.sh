#!/usr/bin/env bash
# The simulator against the measured run: profile the deck here (default: the Fashion-MNIST CNN
# on 2 ranks), then for bsp, gpipe, 1f1b, model-parallel, pipedream and 2bw compare the predicted
# time per minibatch (`pipetrain simulate`) with the median steady-state time of REPS runs, and
# print PASS/FAIL at 15%. Writes runs/bench_predicted_vs_measured/predicted_vs_measured.{csv,md}.
# Options: tools/studies.py predict --help (e.g. --split [2] --reps 5 --tolerance 0.1)
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
exec /usr/bin/python3 tools/studies.py predict "$@"
