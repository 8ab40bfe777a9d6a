#!/usr/bin/env bash
# Short fixed-layout runs of the four decks under 1f1b, zb-v and pipedream on 2 ranks, for
# checking that a refactoring changes no output bit. Usage:
#   tools/bitwise_runs.sh BIN OUT            run every case with BIN into OUT/<case>
#   tools/bitwise_runs.sh --compare BIN A B  compare the runs in A and B (weights bitwise with
#                                            `BIN compare --rtol 0`, logged losses as text)
# Exit 0 when every case ran (or, with --compare, every pair is identical).
set -u
MPIFLAGS="$([ "$(id -u)" = 0 ] && echo --allow-run-as-root) --oversubscribe"
STEPS=${STEPS:-12}
# ONLY="mlp_1f1b gpt_zbv" runs (or compares) just those cases
# case: deck, schedule, split (zb-v: 4 stages on 2 ranks), microbatches, batch size[, one more --set]
# (pipedream on tinygpt unties the head: tied layers in two stages need a flush schedule)
CASES=(
  "mlp_1f1b       input/fashion_mlp.toml    1f1b      [3]        4 128"
  "mlp_zbv        input/fashion_mlp.toml    zb-v      [2,3,5]    4 128"
  "mlp_pipedream  input/fashion_mlp.toml    pipedream [3]        1 128"
  "cnn_1f1b       input/fashion_cnn.toml    1f1b      [5]        4 128"
  "cnn_zbv        input/fashion_cnn.toml    zb-v      [3,5,8]    4 128"
  "cnn_pipedream  input/fashion_cnn.toml    pipedream [5]        1 128"
  "gpt_1f1b       input/tinygpt.toml        1f1b      [4]        4 16"
  "gpt_zbv        input/tinygpt.toml        zb-v      [2,4,6]    4 16"
  "gpt_pipedream  input/tinygpt.toml        pipedream [4]        1 16  model.layers.7.tie=\"\""
  "resnet_1f1b    input/fashion_resnet.toml 1f1b      [4]        4 64"
  "resnet_zbv     input/fashion_resnet.toml zb-v      [2,4,6]    4 64"
  "resnet_pipedream input/fashion_resnet.toml pipedream [4]      1 64"
)

if [ "${1:-}" = --compare ]; then
  bin=$2 a=$3 b=$4 bad=0
  for c in "${CASES[@]}"; do
    read -r name _ <<<"$c"
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
    if "$bin" compare "$a/$name" "$b/$name" --rtol 0 --quiet >/dev/null 2>&1 &&
       diff <(grep -o '"loss":[^,]*' "$a/$name/metrics.jsonl") <(grep -o '"loss":[^,]*' "$b/$name/metrics.jsonl") >/dev/null; then
      echo "identical  $name"
    else
      echo "DIFFERENT  $name"; bad=1
    fi
  done
  exit $bad
fi

bin=$1 out=$2 bad=0
mkdir -p "$out"
for c in "${CASES[@]}"; do
  read -r name deck sched split mbs batch extra <<<"$c"
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
  if timeout --kill-after=5 600 mpirun $MPIFLAGS -np 2 "$bin" train "$deck" \
      --set run.name="$name" --set run.output_dir="$out" --set run.plots=false \
      --set parallel.split="$split" --set parallel.schedule="$sched" --set parallel.microbatches="$mbs" \
      --set train.batch_size="$batch" --set train.max_steps="$STEPS" --set train.log_every=1 \
      --set train.eval_batch_size=64 --set checkpoint.at_end=false ${extra:+--set "$extra"} >"$out/$name.log" 2>&1; then
    echo "ran  $name"
  else
    echo "FAIL $name (see $out/$name.log)"; bad=1
  fi
done
exit $bad
