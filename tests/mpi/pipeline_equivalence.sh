#!/usr/bin/env bash
# Pipeline equivalence: for every layout (stages x replicas) and flush schedule, 20 steps of
# the Fashion-MNIST MLP (and one CNN layout) give the same weights as one process with the
# same microbatch split, within 1e-5 relative per tensor; a repeated run is bitwise equal.
# make test runs every layout but 4x1 and the default plots; make test-more 4x1 and the plots
# without Python or matplotlib (tests/mpi/lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_equiv.XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--set train.max_steps=20 --set train.log_every=10 --set run.output_dir="$out" --set parallel.microbatches=4
        --set train.eval_batch_size=2000)
mlp=input/fashion_mlp.toml

train "$out" ref 1 $mlp "${common[@]}" --set 'parallel.split=[]'
# name np split replicas schedules...
layouts=(
  "2x1 2 [3] [1,1] gpipe 1f1b model-parallel"
  "4x1 4 [2,4,5] [1,1,1,1] gpipe 1f1b model-parallel"  # make test-more
  "2x2 4 [3] [2,2] gpipe 1f1b model-parallel"
  "3st-2-1-1 4 [2,4] [2,1,1] gpipe 1f1b model-parallel"
  "1x2 2 [] [2] bsp 1f1b"
)
for l in "${layouts[@]}"; do
  read -r name np split reps scheds <<<"$l"
  if [ "$name" = 4x1 ]; then in_more || continue; else in_core || continue; fi
  for sched in $scheds; do
    train "$out" "${name}_$sched" "$np" $mlp "${common[@]}" --set "parallel.split=$split" \
      --set "parallel.replicas=$reps" --set "parallel.schedule=$sched"
    compare "$out/ref" "$out/${name}_$sched" 1e-5
    same_accuracy "$out/ref" "$out/${name}_$sched" 0.0003
  done
done
# determinism: the same layout twice is bitwise identical (weights and logged losses)
if in_core; then
train "$out" 2x2_1f1b_again 4 $mlp "${common[@]}" --set 'parallel.split=[3]' --set 'parallel.replicas=[2,2]'
compare "$out/2x2_1f1b" "$out/2x2_1f1b_again" 0
same_losses "$out/2x2_1f1b" "$out/2x2_1f1b_again"
# the CNN as a 2-stage pipeline against one process
cnn=(--set train.max_steps=20 --set train.log_every=10 --set run.output_dir="$out" --set parallel.microbatches=4)
train "$out" cnn_ref 1 input/fashion_cnn.toml "${cnn[@]}"
train "$out" cnn_2x1 2 input/fashion_cnn.toml "${cnn[@]}" --set 'parallel.split=[4]'
compare "$out/cnn_ref" "$out/cnn_2x1" 1e-5
# activation memory: 1f1b keeps at most K microbatches in flight on stage 0, gpipe all M
for sched in gpipe 1f1b; do
  train "$out" "mem_$sched" 2 $mlp "${common[@]}" --set 'parallel.split=[3]' --set parallel.microbatches=16 \
    --set "parallel.schedule=$sched"
done
inflight() { grep -o '"max_in_flight": [0-9]*' "$1/summary.json" | head -1 | awk '{print $2}'; }
actb() { grep -o '"activation_bytes": [0-9]*' "$1/summary.json" | head -1 | awk '{print $2}'; }
expect "gpipe M=16 holds 16 microbatches on stage 0 (got $(inflight "$out/mem_gpipe"), $(actb "$out/mem_gpipe") bytes)" \
  test "$(inflight "$out/mem_gpipe")" = 16
expect "1f1b M=16 K=2 holds 2 on stage 0 (got $(inflight "$out/mem_1f1b"), $(actb "$out/mem_1f1b") bytes)" \
  test "$(inflight "$out/mem_1f1b")" = 2
fi

# more: plots without Python or matplotlib
if in_more; then
# run.plots: the run prints where each plot went; without a working Python, or without
# matplotlib (simulated: a matplotlib module on PYTHONPATH that fails to import, as on a machine
# without python3-matplotlib), it says why and still succeeds
PIPETRAIN_PYTHON=/bin/false train "$out" plots_off 2 $mlp "${common[@]}" --set 'parallel.split=[3]' --set run.plots=true
expect "run.plots without Python: 'plots skipped' printed, exit 0, no PNG" \
  bash -c "grep -q '^plots skipped: /bin/false' '$out/plots_off.log' && [ ! -e '$out/plots_off/timeline.png' ]"
mkdir -p "$out/no_matplotlib"
cat >"$out/no_matplotlib/matplotlib.py" <<'PY'
raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
PY
PYTHONPATH="$out/no_matplotlib" train "$out" plots_nompl 2 $mlp "${common[@]}" --set 'parallel.split=[3]' --set run.plots=true
expect "run.plots without matplotlib: 'plots skipped: ... No module named 'matplotlib'' with the package to install, exit 0, no PNG" \
  bash -c "grep -q \"^plots skipped: .*No module named 'matplotlib'.*python3-matplotlib\" '$out/plots_nompl.log' && [ ! -e '$out/plots_nompl/timeline.png' ]"
fi

if in_core; then
# matplotlib is installed with the runtime packages (tools/deps.sh), so plots are drawn by default
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  # as `make run` does: no run.plots setting (lib.sh's train turns plots off)
  timeout --kill-after=5 300 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train $mlp "${common[@]}" --set 'parallel.split=[3]' \
    --set run.name=plots_on >"$out/plots_on.log" 2>&1
  expect "run with plots on by default: exit 0" test $? = 0
  for png in timeline accuracy; do
    expect "run.plots (default on): 'plot: $out/plots_on/$png.png' printed and the file is a PNG" \
      bash -c "grep -q '^plot: $out/plots_on/$png.png' '$out/plots_on.log' && head -c 4 '$out/plots_on/$png.png' | grep -q PNG"
  done
else
  echo "FAIL python3-matplotlib is not installed, but make deps installs it with the runtime packages (tools/deps.sh)"
  failures=$((failures + 1))
fi
fi
finish
