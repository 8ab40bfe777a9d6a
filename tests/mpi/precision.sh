#!/usr/bin/env bash
# train.precision = "bf16" through the pipeline: activations and input gradients between
# layers hold bf16 values, so the packed bf16 stage messages lose nothing and every cut,
# schedule and placement equals one process bitwise (MLP, CNN, tinygpt with its tied head);
# stop-and-resume is bitwise (units in flight refused under the other precision); the point-to-point bytes per sample are half of the fp32 run's
# on the same split; tinygpt keeps its product-only operands in half the bytes; and bf16
# really changes the numbers (weights differ from fp32). make test runs four of the six
# pipeline cases; make test-more gpipe and interleaved (tests/mpi/lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_precision.XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--set train.max_steps=12 --set train.log_every=6 --set run.output_dir="$out" --set parallel.microbatches=4
        --set train.eval_batch_size=2000 --set checkpoint.at_end=false)
bf=(--set train.precision=bf16)
mlp=input/fashion_mlp.toml
cnn=input/fashion_cnn.toml
gpt=input/tinygpt.toml
gptc=(--set run.output_dir="$out" --set train.max_steps=6 --set train.log_every=3 --set data.seq_len=16
      --set model.layers.0.dim=64 --set train.batch_size=8 --set parallel.microbatches=4 --set train.eval_batch_size=64
      --set train.eval_every=0 --set checkpoint.at_end=false --set train.warmup_steps=2)

train "$out" mlp_ref 1 $mlp "${common[@]}" "${bf[@]}" --set 'parallel.split=[]'
train "$out" mlp_fp32_ref 1 $mlp "${common[@]}" --set 'parallel.split=[]'
train "$out" cnn_ref 1 $cnn "${common[@]}" "${bf[@]}"
expect "bf16 changes the trained weights (not a no-op)" \
  bash -c "! '$PT_BIN' compare '$out/mlp_ref' '$out/mlp_fp32_ref' --rtol 0 --quiet >/dev/null 2>&1"
cases=(
  "mlp_1f1b_2 $mlp 2 [3] [1,1] 1f1b"
  "mlp_zbh1_4 $mlp 4 [2,4,5] [1,1,1,1] zb-h1"
  "mlp_zbv_2 $mlp 2 [1,3,5] [1,1] zb-v"    # stage 0 = flatten only: the input crosses as fp32
  "mlp_gpipe_2 $mlp 2 [3] [1,1] gpipe"
  "cnn_1f1b_2 $cnn 2 [4] [1,1] 1f1b"
  "cnn_il_2 $cnn 2 [2,4,7] [1,1] interleaved-1f1b"
)
for c in "${cases[@]}"; do
  read -r name deck np split reps sched <<<"$c"
  case $name in mlp_gpipe_2|cnn_il_2) in_more || continue ;; *) in_core || continue ;; esac
  ref=$out/mlp_ref; [ "$deck" = "$cnn" ] && ref=$out/cnn_ref
  train "$out" "$name" "$np" "$deck" "${common[@]}" "${bf[@]}" --set "parallel.split=$split" --set "parallel.replicas=$reps" \
    --set "parallel.schedule=$sched" || continue
  compare "$ref" "$out/$name" 0
done
if in_core; then
# half the bytes between stages: the same split and schedule in fp32
train "$out" mlp_1f1b_2_fp32 2 $mlp "${common[@]}" --set 'parallel.split=[3]' --set 'parallel.replicas=[1,1]' \
  --set parallel.schedule=1f1b
b16=$(json_number "$out/mlp_1f1b_2/summary.json" bytes_p2p_per_sample)
b32=$(json_number "$out/mlp_1f1b_2_fp32/summary.json" bytes_p2p_per_sample)
expect "bf16 p2p bytes per sample ($b16) are half of fp32's ($b32)" \
  awk -v a="$b16" -v b="$b32" 'BEGIN { exit !(b > 0 && a * 2 == b) }'
expect "summary.json states the precision" grep -q '"precision": "bf16"' "$out/mlp_1f1b_2/summary.json"
expect "the PERF line states the precision" grep -q '^PERF .*precision=bf16' "$out/mlp_1f1b_2.log"
# tinygpt: the tied head and attention in bf16, 2 stages against one process
train "$out" gpt_ref 1 $gpt "${gptc[@]}" "${bf[@]}" --set 'parallel.split=[]'
train "$out" gpt_zbh1_2 2 $gpt "${gptc[@]}" "${bf[@]}" --set 'parallel.split=[4]' --set parallel.schedule=zb-h1 && compare "$out/gpt_ref" "$out/gpt_zbh1_2" 0
# what autocast keeps in bf16 (layer-norm outputs, q, k, v, the attention probabilities, the
# merged heads, fc1's output and the GELU's, the head's logits) is kept as bf16 in half the
# bytes, and so is each block's attention branch (h is recomputed from it): a unit's activation
# slot shrinks (the blocks' outputs and the statistics stay fp32, as autocast keeps them). The
# default tinygpt deck: 0.529, this small deck 0.532 (unit test Bf16Storage.SlotsKeepWhatAutocastKeepsInItsDtype);
# issue 24 asks at most 0.55.
train "$out" gpt_fp32_ref 1 $gpt "${gptc[@]}" --set 'parallel.split=[]'
a16=$(json_number "$out/gpt_ref/summary.json" activation_bytes_per_microbatch)
a32=$(json_number "$out/gpt_fp32_ref/summary.json" activation_bytes_per_microbatch)
expect "tinygpt bf16 activation bytes per microbatch ($a16) are at most 0.55 of fp32's ($a32)" \
  awk -v a="$a16" -v b="$a32" 'BEGIN { printf "  bf16/fp32 activation bytes: %.3f\n", a / b; exit !(b > 0 && a <= 0.55 * b) }'
# stop at a checkpoint and resume: bitwise equal to the uninterrupted bf16 run
train "$out" mlp_cut 2 $mlp "${common[@]}" "${bf[@]}" --set 'parallel.split=[3]' --set parallel.schedule=1f1b \
  --set checkpoint.every_steps=6 --stop-at-step 6 &&
  train "$out" mlp_cut 2 $mlp "${common[@]}" "${bf[@]}" --set 'parallel.split=[3]' --set parallel.schedule=1f1b \
    --resume "$out/mlp_cut" && compare "$out/mlp_1f1b_2" "$out/mlp_cut" 0
# pipedream stopped with units and messages in flight: resumed in bf16 it lands on the
# uninterrupted bf16 run bitwise; resumed in fp32 it is refused, naming train.precision (the
# slots hold bf16 activations); a checkpoint from before the precision was recorded (its
# attribute stripped, the manifest's checksums made again) is refused by its slots' size
pd=(--set 'parallel.split=[4]' --set parallel.schedule=pipedream --set 'model.layers.7.tie=""')
resume_fp32() {  # NAME WHAT: resume OUT/NAME in fp32; expect exit 2 and the located message
  timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train $gpt "${gptc[@]}" "${pd[@]}" --set run.name="$1" \
    --set run.plots=false --resume "$out/$1" >"$out/$1.fp32.log" 2>&1
  local rc=$?
  expect "$2: exit 2 (got $rc), a located error naming train.precision" \
    bash -c "[ $rc = 2 ] && grep -q \"key 'train.precision': .* was taken under another precision with units in flight\" '$out/$1.fp32.log'"
}
train "$out" gpt_pd 2 $gpt "${gptc[@]}" "${bf[@]}" "${pd[@]}"
if train "$out" gpt_pd_cut 2 $gpt "${gptc[@]}" "${bf[@]}" "${pd[@]}" --set checkpoint.every_steps=2 --stop-at-step 2; then
  cp -r "$out/gpt_pd_cut" "$out/gpt_pd_old"
  resume_fp32 gpt_pd_cut "bf16 units in flight resumed in fp32"
  expect "the refusal reads the recorded precision" grep -q 'captured under train.precision = "bf16"' "$out/gpt_pd_cut.fp32.log"
  train "$out" gpt_pd_cut 2 $gpt "${gptc[@]}" "${bf[@]}" "${pd[@]}" --resume "$out/gpt_pd_cut" && compare "$out/gpt_pd" "$out/gpt_pd_cut" 0
  expect "the checkpoint's precision attribute stripped" \
    /usr/bin/python3 "$(dirname "$0")/strip_precision.py" "$out/gpt_pd_old/checkpoints/step_000000000002"
  resume_fp32 gpt_pd_old "bf16 units of a checkpoint without its precision resumed in fp32"
  expect "the unrecorded precision is told by the slots' size" grep -q "an unrecorded train.precision, in slots of" "$out/gpt_pd_old.fp32.log"
fi
fi
finish
