#!/usr/bin/env bash
# One-process runs of every deck in input/ and input/experiments/: `pipetrain train DECK`
# without mpirun (an MPI singleton) and under `mpirun -np 1`, a few steps each. With one rank
# there is nothing to plan: split = "auto" becomes one stage without profiling, and an
# explicit split of a flush schedule runs as one stage (the same update rule); each says so.
# Both launches give bitwise the same weights; a collapsed split agrees with the 2-rank
# pipeline within 1e-5; a pipedream split of several stages is refused on one rank (exit 2).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_one_process.XXXXXX)
trap 'rm -rf "$out"' EXIT
STEPS=3
small=(--set train.max_steps=$STEPS --set train.log_every=1 --set train.eval_batch_size=1000 --set run.plots=false
       --set run.output_dir="$out")

# one NAME DECK MODE [args]: MODE "plain" (no mpirun) or "np1"; sets rc, log
one() {
  local name=$1 deck=$2 mode=$3; shift 3
  log="$out/$name.log"
  if [ "$mode" = plain ]; then
    timeout --kill-after=5 180 "$PT_BIN" train "$deck" "${small[@]}" --set run.name="$name" "$@" >"$log" 2>&1
  else
    timeout --kill-after=5 180 mpirun $MPIRUN_FLAGS -np 1 "$PT_BIN" train "$deck" "${small[@]}" --set run.name="$name" "$@" >"$log" 2>&1
  fi
  rc=$?
}

decks=(input/*.toml input/experiments/*.toml)
expect "found the decks (${#decks[@]})" test "${#decks[@]}" -ge 7
for deck in "${decks[@]}"; do
  base=$(basename "$deck" .toml)
  auto=0; grep -qE '^\s*split\s*=\s*"auto"' "$deck" && auto=1
  multi=0; grep -qE '^\s*split\s*=\s*\[\s*[0-9]' "$deck" && multi=1
  for mode in plain np1; do
    name=${base}_$mode
    one "$name" "$deck" "$mode"
    if [ "$rc" != 0 ]; then
      echo "FAIL $deck ($mode) exited $rc:"; tail -5 "$log" | sed 's/^/    | /'; failures=$((failures + 1)); continue
    fi
    s="$out/$name/summary.json"
    expect "$deck ($mode): completed $STEPS steps on 1 rank, 1 stage" \
      bash -c "grep -q '\"status\": \"completed\"' '$s' && grep -q '\"steps\": $STEPS,' '$s' &&
               grep -q '\"ranks\": 1,' '$s' && grep -q '\"stages\": 1,' '$s'"
    expect "$deck ($mode): a test accuracy was measured" grep -qE '"final_test_accuracy": [0-9]' "$s"
    if [ $auto = 1 ]; then
      expect "$deck ($mode): split = \"auto\" says there is nothing to plan, and profiles nothing" \
        bash -c "grep -q 'parallel.split = \"auto\" on one rank: nothing to plan (no profiling); one stage' '$log' &&
                 ! grep -q 'profiling [0-9]* layers' '$log'"
    fi
    if [ $multi = 1 ]; then
      expect "$deck ($mode): the explicit split is said to run as one stage" grep -q "on one rank: its [0-9]* stages run as one stage" "$log"
    fi
  done
  compare "$out/${base}_plain" "$out/${base}_np1" 0
done

# the collapsed split is the pipeline's update rule: the 2-rank 1F1B pipeline agrees within 1e-5
train "$out" cnn_straight_np2 2 input/experiments/cnn_straight.toml "${small[@]}" && compare "$out/cnn_straight_np2" "$out/cnn_straight_np1" 1e-5

# a pipedream split cannot be collapsed: refused, located, once
one refuse input/fashion_mlp.toml plain --set 'parallel.split=[3]' --set parallel.schedule=pipedream
expect "pipedream with split [3] on one rank: exit 2 (got $rc)" test "$rc" = 2
expect "... saying why and what to run" \
  grep -q "key 'parallel.split': \[3\] makes 2 stages, but the job has 1 rank, and pipedream's update rule depends on the stage count.*mpirun -np 2" "$log"
expect "... printed once" test "$(grep -c "makes 2 stages, but the job has 1 rank" "$log")" = 1
finish
