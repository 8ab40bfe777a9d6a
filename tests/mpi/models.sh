#!/usr/bin/env bash
# The transformer and the ResNet as pipelines (test-sized): tinygpt, with its head tied to
# the embedding across stages, is bitwise equal to one process at 2 and 4 stages under 1f1b
# and every zero-bubble schedule (zb-v puts the embedding and the head on one rank); the
# ResNet is bitwise equal at 2 stages, batch-norm running statistics included; a run killed
# mid-segment (checkpoint, then stop) resumes bitwise: tied weights and running statistics.
# make test runs five of the nine tinygpt layouts; make test-more the other four (zb-h2 at 2 and
# 4 ranks, zb-h1 at 4, zb-v at 2; tests/mpi/lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_models.XXXXXX)
trap 'rm -rf "$out"' EXIT
gpt=(input/tinygpt.toml --set run.output_dir="$out" --set train.max_steps=6 --set train.log_every=3 --set data.seq_len=16
     --set model.layers.0.dim=64
     --set train.batch_size=8 --set parallel.microbatches=4 --set train.eval_batch_size=64 --set train.eval_every=0
     --set checkpoint.at_end=false --set train.warmup_steps=2)
res=(input/fashion_resnet.toml --set run.output_dir="$out" --set train.max_steps=4 --set train.log_every=2
     --set train.batch_size=16 --set parallel.microbatches=2 --set train.eval_batch_size=1000 --set checkpoint.at_end=false)

train "$out" gpt_ref 1 "${gpt[@]}" --set 'parallel.split=[]'
# name np split schedule (tinygpt layers: 0 embedding, 1-6 blocks, 7 head)
for c in "gpt_1f1b_2 2 [4] 1f1b" "gpt_zbh1_2 2 [4] zb-h1" "gpt_zbh2_2 2 [4] zb-h2" "gpt_1f1b_4 4 [2,4,6] 1f1b" \
         "gpt_zbh1_4 4 [2,4,6] zb-h1" "gpt_zbh2_4 4 [2,4,6] zb-h2" "gpt_zbv_2 2 [2,4,6] zb-v" \
         "gpt_zbv_4 4 [1,2,3,4,5,6,7] zb-v" "gpt_il_4 4 [1,2,3,4,5,6,7] interleaved-1f1b"; do
  read -r name np split sched <<<"$c"
  case $name in gpt_zbh2_2|gpt_zbh1_4|gpt_zbh2_4|gpt_zbv_2) in_more || continue ;; *) in_core || continue ;; esac
  train "$out" "$name" "$np" "${gpt[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" || continue
  compare "$out/gpt_ref" "$out/$name" 0
done
if in_core; then
expect "tinygpt reports bits per byte and tokens/s" \
  bash -c "grep -q 'bits/byte' '$out/gpt_1f1b_2.log' && grep -q 'tokens/s' '$out/gpt_1f1b_2.log'"
expect "weights.h5 stores the tied head matrix once (a soft link to the embedding's)" \
  bash -c "h5ls -r '$out/gpt_1f1b_2/weights.h5' | grep -q '/layers/007/weight.*Soft Link {/layers/000/weight}'"

train "$out" res_ref 1 "${res[@]}" --set 'parallel.split=[]'
train "$out" res_2 2 "${res[@]}" --set 'parallel.split=[4]'
compare "$out/res_ref" "$out/res_2" 0
train "$out" res_zbh1_2 2 "${res[@]}" --set 'parallel.split=[4]' --set parallel.schedule=zb-h1
compare "$out/res_ref" "$out/res_zbh1_2" 0

# kill mid-segment: a checkpoint at step 3 (2 for the ResNet), stop, resume, compare bitwise
for c in "gpt 2 [4] zb-h1 3" "res 2 [4] 1f1b 2"; do
  read -r model np split sched at <<<"$c"
  args=("${gpt[@]}"); ref=gpt_zbh1_2
  [ "$model" = res ] && args=("${res[@]}") && ref=res_2
  train "$out" "${model}_cut" "$np" "${args[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" \
    --set checkpoint.every_steps="$at" --stop-at-step "$at" || continue
  expect "$model stopped at step $at" grep -q "stopped at step $at" "$out/${model}_cut.log"
  train "$out" "${model}_cut" "$np" "${args[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" \
    --resume "$out/${model}_cut" || continue
  compare "$out/$ref" "$out/${model}_cut" 0
done
fi
finish
