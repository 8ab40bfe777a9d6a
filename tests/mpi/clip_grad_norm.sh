#!/usr/bin/env bash
# train.clip_grad_norm (docs/ARCHITECTURE.md, "Gradient clipping"): tinygpt (its head tied to
# the embedding) with a threshold that acts at every step is bitwise one process at 2 and 4
# ranks under 1f1b, zb-h1, interleaved-1f1b and zb-v (the per-tensor sums of squares of every
# stage gathered by the IR's GRAD_NORM; the tied matrix counted once): weights, every step's
# loss and grad_norm; also stopped at step 2 and resumed. A clipped pipedream run (each stage
# against its share of the threshold) is bitwise `pipetrain emulate`'s. Negative control: the
# same run unclipped ends with other weights and losses. `pipetrain schedule` shows the
# GRAD_NORM collective valid. A warm-up longer than the run is a warning naming both keys.
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_clip.XXXXXX)
trap 'rm -rf "$out"' EXIT
corpus=/usr/share/games/fortunes/food
if [ ! -f "$corpus" ]; then
  echo "  skip: the fortunes corpus ($corpus) is not installed (make deps)"
  exit 0
fi
gpt=(input/tinygpt.toml --set run.output_dir="$out" --set data.path="$corpus" --set data.seq_len=32 --set train.batch_size=8
     --set parallel.microbatches=4 --set train.max_steps=4 --set train.warmup_steps=2 --set train.log_every=1
     --set train.eval_batch_size=64 --set checkpoint.at_end=false --set train.clip_grad_norm=0.5)

# norms RUN: every step's grad_norm as logged
norms() { grep '"type":"step"' "$1/metrics.jsonl" | grep -o '"grad_norm":[^,}]*'; }

train "$out" ref 1 "${gpt[@]}" --set 'parallel.split=[]' --set parallel.schedule=1f1b
expect "every step logs grad_norm, and the threshold acts at each (norm > 0.5)" \
  bash -c "test \$(grep -c '\"grad_norm\"' '$out/ref/metrics.jsonl') = 4 &&
           grep -o '\"grad_norm\":[^,}]*' '$out/ref/metrics.jsonl' | cut -d: -f2 | awk '\$1 <= 0.5 { bad = 1 } END { exit bad }'"
# negative control: the same run unclipped ends with other weights and other losses, so the
# bitwise matches below are of runs that clipping changed
train "$out" noclip 1 "${gpt[@]}" --set 'parallel.split=[]' --set parallel.schedule=1f1b --set train.clip_grad_norm=0
expect "negative control: clipping changed the weights (unclipped run differs from the clipped one)" \
  bash -c "'$PT_BIN' compare '$out/ref' '$out/noclip' --rtol 0 --quiet >'$out/noclip.compare' 2>&1; test \$? = 10"
expect "negative control: clipping changed the losses" \
  bash -c "! diff <(grep -o '\"loss\":[^,]*' '$out/ref/metrics.jsonl') <(grep -o '\"loss\":[^,]*' '$out/noclip/metrics.jsonl') >/dev/null"
# name np split schedule (tinygpt: layers 0-7, 7 the tied head)
cases=(
  "1f1b_2 2 [4] 1f1b"
  "zbh1_2 2 [4] zb-h1"
  "1f1b_4 4 [2,4,6] 1f1b"
  "zbh1_4 4 [2,4,6] zb-h1"
  "il_2 2 [2,4,6] interleaved-1f1b"
  "zbv_2 2 [2,4,6] zb-v"
  "il_4 4 [1,2,3,4,5,6,7] interleaved-1f1b"
)
for c in "${cases[@]}"; do
  read -r name np split sched <<<"$c"
  train "$out" "$name" "$np" "${gpt[@]}" --set "parallel.split=$split" --set "parallel.schedule=$sched" || continue
  compare "$out/ref" "$out/$name" 0
  same_losses "$out/ref" "$out/$name"
  norms "$out/ref" >"$out/ref.norms"; norms "$out/$name" >"$out/$name.norms"
  expect "$name: every step's grad_norm is one process's ($(wc -l <"$out/$name.norms") steps)" \
    bash -c "test -s '$out/ref.norms' && cmp -s '$out/ref.norms' '$out/$name.norms'"
done

# checkpoint and resume with clipping on: stopped at step 2 on 2 ranks (zb-h1), resumed to
# step 4, bitwise one process (the cut's place recomputed in the IR with GRAD_NORM)
train "$out" res 2 "${gpt[@]}" --set 'parallel.split=[4]' --set parallel.schedule=zb-h1 --stop-at-step 2 &&
  train "$out" res 2 "${gpt[@]}" --set 'parallel.split=[4]' --set parallel.schedule=zb-h1 --resume "$out/res" &&
  compare "$out/ref" "$out/res" 0 && same_losses "$out/ref" "$out/res"

# the warm-up warning (train.warmup_steps 100 of tinygpt against 4 steps)
train "$out" warm 1 "${gpt[@]}" --set 'parallel.split=[]' --set train.warmup_steps=100 --set train.max_steps=2
expect "a warm-up longer than the run warns, naming train.warmup_steps and train.max_steps with where each was set" \
  grep -q "^warning: command line '--set train.warmup_steps=100': key 'train.warmup_steps': 100 warm-up steps are more than the run's 2 steps (train.max_steps = 2 set at command line '--set train.max_steps=2')" "$out/warm.log"

# the schedule command validates the IR with its GRAD_NORM collective
"$PT_BIN" schedule "${gpt[@]}" --ranks 2 --set 'parallel.split=[2,4,6]' --set parallel.schedule=zb-v >"$out/schedule.txt" 2>&1
expect "pipetrain schedule: zb-v with clipping is valid" grep -q "schedule valid: deadlock-free" "$out/schedule.txt"

# asynchronous: each stage clips its own update against its share; the emulator does the same
mlp=(input/fashion_mlp.toml --set run.output_dir="$out" --set train.max_steps=12 --set train.log_every=4
     --set train.eval_batch_size=2000 --set checkpoint.at_end=false --set train.clip_grad_norm=0.2
     --set 'parallel.split=[3]' --set parallel.schedule=pipedream)
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  "$PT_BIN" emulate "${mlp[@]}" --ranks 2 --set run.name=emu >/dev/null 2>&1 || { echo "FAIL emulate"; failures=$((failures + 1)); }
  train "$out" pd 2 "${mlp[@]}" && compare "$out/emu" "$out/pd" 0
else
  echo "  skip: pipedream against the emulator: Fashion-MNIST is not installed (make deps)"
fi
finish
