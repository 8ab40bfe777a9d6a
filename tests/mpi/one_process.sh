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
small=(--set train.max_steps=3 --set train.log_every=1 --set train.eval_batch_size=1000 --set run.plots=false
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

# text decks read a 64 KB slice of the fortunes corpus (its last 5% validates: 12 windows of
# 256), so evaluation stays a few seconds; the decks at the sizes pipelines exist for (85M and
# 303M parameters) take one step of 2 samples without a checkpoint, launched once: they are
# here to show that they run on one rank.
corpus="$out/corpus.txt"
cat $(ls -d /usr/share/games/fortunes/* | grep -v "\.") | head -c 65536 >"$corpus"
heavy=" gpt2_small gpt_300m "
np1_core=" fashion_mlp tinygpt cnn_straight "
decks=(input/*.toml input/experiments/*.toml)
expect "found the decks (${#decks[@]})" test "${#decks[@]}" -ge 7
for deck in "${decks[@]}"; do
  base=$(basename "$deck" .toml)
  auto=0; grep -qE '^\s*split\s*=\s*"auto"' "$deck" && auto=1
  multi=0; grep -qE '^\s*split\s*=\s*\[\s*[0-9]' "$deck" && multi=1
  extra=(); STEPS=3
  grep -qE '^\s*source\s*=\s*"text"' "$deck" && extra+=(--set data.path="$corpus")
  if [[ $heavy == *" $base "* ]]; then
    STEPS=1; extra+=(--set train.max_steps=1 --set train.batch_size=2 --set parallel.microbatches=2
                     --set train.eval_batch_size=4 --set train.warmup_steps=0 --set checkpoint.at_end=false)
  fi
  # core: every small deck without mpirun, three of them under mpirun -np 1 as well; more: the
  # other decks under both launches, and the heavy ones (without mpirun: the launch comparison
  # is the small decks' job)
  if [ "$STEPS" = 1 ]; then modes=plain; in_more || continue
  elif [[ $np1_core == *" $base "* ]]; then modes="plain np1"; in_core || continue
  else modes=""; in_core && modes=plain; in_more && modes="plain np1"; fi
  for mode in $modes; do
    name=${base}_$mode
    one "$name" "$deck" "$mode" "${extra[@]}"
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
  [ "$modes" = plain ] || compare "$out/${base}_plain" "$out/${base}_np1" 0
done

if in_core; then
# the collapsed split is the pipeline's update rule: the 2-rank 1F1B pipeline agrees within 1e-5
train "$out" cnn_straight_np2 2 input/experiments/cnn_straight.toml "${small[@]}" && compare "$out/cnn_straight_np2" "$out/cnn_straight_np1" 1e-5

# a pipedream split cannot be collapsed: refused, located, once
one refuse input/fashion_mlp.toml plain --set 'parallel.split=[3]' --set parallel.schedule=pipedream
expect "pipedream with split [3] on one rank: exit 2 (got $rc)" test "$rc" = 2
expect "... saying why and what to run" \
  grep -q "key 'parallel.split': \[3\] makes 2 stages, but the job has 1 rank, and pipedream's update rule depends on the stage count.*mpirun -np 2" "$log"
expect "... printed once" test "$(grep -c "makes 2 stages, but the job has 1 rank" "$log")" = 1

fi

# every flush schedule of the registry collapses (zb-h1, zb-h2 are flush schedules too): a split
# on one rank is bitwise the one-stage run; interleaved and zb-v keep theirs on the one rank group
# (looped: any stage count; V: exactly 2 stages, else refused naming the split that fits)
schedules=(); in_core && schedules+=(zb-h1); in_more && schedules+=(zb-h2)
for s in "${schedules[@]}"; do
  one "${s}_split" input/fashion_mlp.toml plain --set 'parallel.split=[3]' --set parallel.schedule=$s
  expect "$s with split [3] on one rank: exit 0 (got $rc)" test "$rc" = 0
  expect "... runs as one stage" grep -q "parallel.split = \[3\] on one rank: its 2 stages run as one stage" "$log"
  one "${s}_one" input/fashion_mlp.toml plain --set 'parallel.split=[]' --set parallel.schedule=$s
  compare "$out/${s}_one" "$out/${s}_split" 0
done

# more: the looped and V placements on one rank
if in_more; then
[ -d "$out/zb-h1_one" ] || one zb-h1_one input/fashion_mlp.toml plain --set 'parallel.split=[]' --set parallel.schedule=zb-h1
one interleaved_split input/fashion_mlp.toml plain --set 'parallel.split=[1,3,5]' --set parallel.schedule=interleaved-1f1b
expect "interleaved-1f1b with split [1,3,5] on one rank: exit 0 (got $rc), 4 stages looped on the rank" \
  bash -c "test $rc = 0 && grep -q '\"stages\": 4,' '$out/interleaved_split/summary.json'"
one interleaved_one input/fashion_mlp.toml plain --set 'parallel.split=[]' --set parallel.schedule=interleaved-1f1b
compare "$out/interleaved_one" "$out/interleaved_split" 0
one zbv_split input/fashion_mlp.toml plain --set 'parallel.split=[3]' --set parallel.schedule=zb-v
expect "zb-v with split [3] on one rank: exit 0 (got $rc), its V of 2 stages on the rank" \
  bash -c "test $rc = 0 && grep -q '\"placement\": \"v\"' '$out/zbv_split/summary.json'"
compare "$out/zb-h1_one" "$out/zbv_split" 0
one zbv_refuse input/fashion_mlp.toml plain --set 'parallel.split=[1,3,5]' --set parallel.schedule=zb-v
expect "zb-v with 4 stages on one rank: exit 2 (got $rc), saying a V holds exactly 2 stages per rank" \
  bash -c "test $rc = 2 && grep -q \"\\[1, 3, 5\\] makes 4 stages, but zb-v places exactly 2 stages on each rank.*parallel.split = \\[k\\]\" '$log'"
fi
finish
