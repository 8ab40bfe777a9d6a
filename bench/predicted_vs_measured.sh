#!/usr/bin/env bash
# The simulator against the measured run (default: the Fashion-MNIST CNN on 2 ranks): REPS rounds,
# each a fresh profile, then for bsp, gpipe, 1f1b, model-parallel, pipedream and 2bw the predicted
# time per minibatch (`pipetrain simulate`) and one measured steady-state run. Prints each
# schedule's median error over the rounds with its range, PASS/FAIL at 10%, and the median over
# schedules against 5%. Writes runs/bench_predicted_vs_measured/predicted_vs_measured.{csv,md}.
# Options: tools/studies.py predict --help (e.g. --split [2] --reps 5 --set parallel.recompute=full)
# gpt2_small with recomputation (bench/README.md records it): bench/predicted_vs_measured.sh --deck input/gpt2_small.toml
#   --split [7] --batch 8 --steps 6 --log-every 1 --schedules 1f1b,zb-h1,gpipe
#   --set parallel.recompute=full --set train.eval_batch_size=8 --set data.path=<small corpus>
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
exec /usr/bin/python3 tools/studies.py predict "$@"
