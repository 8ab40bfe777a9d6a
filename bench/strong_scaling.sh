#!/usr/bin/env bash
# Strong scaling of one deck (default: the Fashion-MNIST CNN, minibatch 128): measured points
# up to the cores of this machine (each run REPS times, steady-state steps only), simulator
# predictions beyond (labelled predicted), for bsp and the pipeline schedules. Writes
# runs/bench_strong_scaling/{strong_scaling.csv, strong_scaling.md, strong_scaling.png}.
# Options: tools/studies.py scaling --help (e.g. --deck input/experiments/vgg_synthetic.toml --reps 5)
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
exec /usr/bin/python3 tools/studies.py scaling "$@"
