#!/usr/bin/env bash
# The second-generation schedules (zb-h1, zb-h2, interleaved-1f1b, zb-v) against one process
# with the same microbatch split: bitwise equal without replicas, on the MLP and the CNN, at
# 2 and 4 ranks wherever the layer count allows the placement; within 1e-5 with replicas.
# The trace shows I and W as separate slices, `simulate --compare` reads a zb-v run's V layout,
# and stopping at a checkpoint then resuming is bitwise equal to the uninterrupted run for
# every new schedule. make test runs 7 of the 15 layouts and 2 of the 4 resumes; make test-more
# the rest (tests/mpi/lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_newsched.XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--set train.max_steps=12 --set train.log_every=6 --set run.output_dir="$out" --set parallel.microbatches=4
        --set train.eval_batch_size=2000 --set checkpoint.at_end=false)
mlp=input/fashion_mlp.toml
cnn=input/fashion_cnn.toml

train "$out" mlp_ref 1 $mlp "${common[@]}" --set 'parallel.split=[]'
train "$out" cnn_ref 1 $cnn "${common[@]}"
# name deck np split replicas schedule tolerance (MLP layers 0-6, CNN 0-10)
cases=(
  "mlp_zbh1_2 $mlp 2 [3] [1,1] zb-h1 0"
  "mlp_zbh2_2 $mlp 2 [3] [1,1] zb-h2 0"
  "mlp_zbh1_4 $mlp 4 [2,4,5] [1,1,1,1] zb-h1 0"
  "mlp_zbh2_4 $mlp 4 [2,4,5] [1,1,1,1] zb-h2 0"
  "mlp_il_2 $mlp 2 [1,3,5] [1,1] interleaved-1f1b 0"
  "mlp_zbv_2 $mlp 2 [1,3,5] [1,1] zb-v 0"
  "cnn_zbh1_2 $cnn 2 [4] [1,1] zb-h1 0"
  "cnn_zbh2_4 $cnn 4 [2,4,7] [1,1,1,1] zb-h2 0"
  "cnn_il_2 $cnn 2 [2,4,7] [1,1] interleaved-1f1b 0"
  "cnn_il_4 $cnn 4 [1,2,3,4,5,7,9] [1,1,1,1] interleaved-1f1b 0"
  "cnn_zbv_4 $cnn 4 [1,2,3,4,5,7,9] [1,1,1,1] zb-v 0"
  "mlp_zbh1_2x2 $mlp 4 [3] [2,2] zb-h1 1e-5"
  "mlp_zbh2_3 $mlp 3 [3] [2,1] zb-h2 1e-5"
  "mlp_il_2x2 $mlp 4 [1,3,5] [2,2] interleaved-1f1b 1e-5"
  "mlp_zbv_2x2 $mlp 4 [1,3,5] [2,2] zb-v 1e-5"
)
core_cases=" mlp_zbh1_2 mlp_zbh2_4 mlp_il_2 mlp_zbv_2 cnn_zbv_4 mlp_zbh1_2x2 mlp_zbv_2x2 "  # make test; the rest: more
for c in "${cases[@]}"; do
  read -r name deck np split reps sched tol <<<"$c"
  if [[ $core_cases == *" $name "* ]]; then in_core || continue; else in_more || continue; fi
  ref=$out/mlp_ref; [ "$deck" = "$cnn" ] && ref=$out/cnn_ref
  train "$out" "$name" "$np" "$deck" "${common[@]}" --set "parallel.split=$split" --set "parallel.replicas=$reps" \
    --set "parallel.schedule=$sched" || continue
  compare "$ref" "$out/$name" "$tol"
done
# the trace shows the split backward: I and W of a unit as separate slices
if in_core; then
expect "zb-h1 trace has I and W slices" \
  bash -c "grep -q '\"name\":\"I0\"' '$out/mlp_zbh1_2/trace.json' && grep -q '\"name\":\"W0\"' '$out/mlp_zbh1_2/trace.json'"
expect "zb-v trace names the stage of each slice (0F0, 3W0)" \
  bash -c "grep -q '\"name\":\"0F0\"' '$out/mlp_zbv_2/trace.json' && grep -q '\"name\":\"3W0\"' '$out/mlp_zbv_2/trace.json'"
# simulate --compare builds the run's recorded layout (a V: 4 stages on 2 ranks) and sets the
# measured per-stage times (I + W as the backward) beside the prediction
"$PT_BIN" simulate $mlp --bandwidth 1e10 --compare "$out/mlp_zbv_2" >"$out/zbv_compare.txt" 2>&1
src=$?
expect "simulate --compare on the zb-v run: exit 0 (got $src), the V layout, 4 measured stages" \
  bash -c "test $src = 0 && grep -q 'placement v (2 stages per rank)' '$out/zbv_compare.txt' &&
           grep -q 'predicted vs measured (zb-v' '$out/zbv_compare.txt' && grep -qE '^3 +5-6 +[0-9.]+ +[0-9.]+ ' '$out/zbv_compare.txt'"
# checkpoint/resume: stop at step 6 after a checkpoint, resume, and land bitwise on the
# uninterrupted run's weights
fi
for c in "mlp_zbh1_2 2 [3] zb-h1 core" "mlp_zbh2_4 4 [2,4,5] zb-h2 more" "mlp_il_2 2 [1,3,5] interleaved-1f1b more" \
         "mlp_zbv_2 2 [1,3,5] zb-v core"; do
  read -r name np split sched part <<<"$c"
  in_$part || continue
  [ -d "$out/$name" ] || train "$out" "$name" "$np" $mlp "${common[@]}" --set "parallel.split=$split" \
    --set "parallel.schedule=$sched" || continue   # its uncut run is a core case
  train "$out" "${name}_cut" "$np" $mlp "${common[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" \
    --set checkpoint.every_steps=6 --stop-at-step 6 || continue
  expect "$sched stopped at step 6" grep -q "stopped at step 6" "$out/${name}_cut.log"
  train "$out" "${name}_cut" "$np" $mlp "${common[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" \
    --resume "$out/${name}_cut" || continue
  compare "$out/$name" "$out/${name}_cut" 0
done
finish
