#!/usr/bin/env bash
# PipeDream's asynchronous schedules against the sequential emulator: for layouts 2x1, 4x1
# and 3 stages with replicas 2-1-1, and each of pipedream, pipedream-vsync and 2bw, 30 steps
# of the MLP give the emulator's weights within 1e-5 relative, and a repeated run is bitwise
# identical. The version log shows the stashing rules (and their violation without
# stashing); summary.json reports the weight versions each stage held. make test runs the 4x1
# and 2-1-1 layouts; make test-more the 2x1 layout and the divergence's remedy (tests/mpi/lib.sh:
# PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_async.XXXXXX)
trap 'rm -rf "$out"' EXIT
deck=input/fashion_mlp.toml
common=(--set train.max_steps=30 --set train.log_every=10 --set run.output_dir="$out" --set parallel.microbatches=4
        --set train.eval_batch_size=2000 --set run.debug_versions=true)

# versions_ok RUN RULE: check every line of the version log against RULE
versions_ok() {
  local run=$1 rule=$2
  cat "$run"/versions/rank*.jsonl | tr -d '{}"' | tr ',:' '  ' | awk -v rule="$rule" -v M=4 '
    { for (i = 1; i < NF; i += 2) v[$i] = $(i + 1); n++
      if (rule == "stash" && v["fwd"] != v["bwd"]) bad++
      if (rule == "2bw") { t = int(v["mb"] / M) - 1; if (t < 0) t = 0; if (v["fwd"] != t || v["bwd"] != t) bad++ }
      if (rule == "vsync") { key = v["mb"]; if (key in f) { if (f[key] != v["fwd"]) bad++ } else f[key] = v["fwd"]; if (v["fwd"] != v["bwd"]) bad++ }
      if (rule == "nostash" && v["fwd"] != v["bwd"]) differ++ }
    END { if (n == 0) { print "    no version records"; exit 1 }
          if (rule == "nostash") { printf "    %d of %d records read a newer version in backward\n", differ, n; exit !(differ > 0) }
          printf "    %d records, %d violations\n", n, bad; exit bad > 0 }'
}

layouts=(
  "2x1 2 [3] [1,1] more"
  "4x1 4 [2,4,5] [1,1,1,1] core"
  "3st-2-1-1 4 [2,4] [2,1,1] core"
)
for l in "${layouts[@]}"; do
  read -r name np split reps part <<<"$l"
  in_$part || continue
  for sched in pipedream pipedream-vsync 2bw; do
    args=(--set "parallel.split=$split" --set "parallel.replicas=$reps" --set "parallel.schedule=$sched")
    "$PT_BIN" emulate $deck --ranks "$np" "${common[@]}" "${args[@]}" --set run.name="emu_${name}_$sched" >/dev/null ||
      { echo "FAIL emulator ${name} $sched"; failures=$((failures + 1)); }
    train "$out" "${name}_$sched" "$np" $deck "${common[@]}" "${args[@]}" || continue
    compare "$out/emu_${name}_$sched" "$out/${name}_$sched" 1e-5
    case $sched in
      pipedream) expect "$name pipedream: forward and backward read the same version" versions_ok "$out/${name}_$sched" stash ;;
      pipedream-vsync) expect "$name vsync: every stage reads stage 0's version" versions_ok "$out/${name}_$sched" vsync ;;
      2bw) expect "$name 2bw: minibatch t reads W(t-1)" versions_ok "$out/${name}_$sched" 2bw ;;
    esac
  done
done

# evaluation every 10 steps drains the pipeline there; the emulator drains at the same steps
# the diverging pipedream run (core) and its remedy (more)
div=(--set train.max_steps=200 --set train.log_every=50 --set run.output_dir="$out" --set train.eval_batch_size=2000
     --set 'parallel.split=[2,4,5]' --set parallel.schedule=pipedream --set run.plots=false)

if in_core; then
seg=(--set train.eval_every=10 --set 'parallel.split=[2,4,5]' --set parallel.schedule=pipedream)
"$PT_BIN" emulate $deck --ranks 4 "${common[@]}" "${seg[@]}" --set run.name=emu_4x1_segments >/dev/null ||
  { echo "FAIL emulator with eval_every"; failures=$((failures + 1)); }
train "$out" 4x1_segments 4 $deck "${common[@]}" "${seg[@]}"
compare "$out/emu_4x1_segments" "$out/4x1_segments" 1e-5
expect "three evaluations logged (steps 10, 20 and the epoch end at 30)" \
  test "$(grep -c '"test_accuracy"' "$out/4x1_segments/metrics.jsonl")" = 3

# bitwise repeatability
for sched in pipedream pipedream-vsync 2bw; do
  train "$out" "4x1_${sched}_again" 4 $deck "${common[@]}" --set 'parallel.split=[2,4,5]' --set "parallel.schedule=$sched"
  compare "$out/4x1_$sched" "$out/4x1_${sched}_again" 0
  same_losses "$out/4x1_$sched" "$out/4x1_${sched}_again"
done

# the comparison has teeth: another rule's emulator does not match
if "$PT_BIN" compare "$out/emu_4x1_pipedream" "$out/4x1_pipedream-vsync" --rtol 1e-5 --quiet >/dev/null; then
  echo "FAIL negative control: vsync run matches the pipedream emulator"; failures=$((failures + 1))
else
  echo "  ok   negative control: the vsync run differs from the pipedream emulator"
fi

# without stashing the backward reads newer weights than its forward (the invalid baseline)
train "$out" 4x1_nostash 4 $deck "${common[@]}" --set 'parallel.split=[2,4,5]' --set parallel.schedule=pipedream-nostash
expect "nostash violates stashing (as it must)" versions_ok "$out/4x1_nostash" nostash
expect "nostash is labelled invalid in summary.json" grep -q '"valid_gradients": false' "$out/4x1_nostash/summary.json"
expect "nostash is labelled in the log" grep -q "gradients are INVALID" "$out/4x1_nostash.log"

# delayed gradients and momentum: the default deck's SGD (lr 0.05, momentum 0.9) under pipedream
# on 4 stages goes non-finite (bitwise repeatable: at step 134 here); the message says why and
# what to change, and the remedy it names (momentum 0) trains the same steps
timeout --kill-after=5 300 mpirun $MPIRUN_FLAGS -np 4 "$PT_BIN" train $deck "${div[@]}" --set run.name=diverge >"$out/diverge.log" 2>&1
rc=$?
expect "pipedream, 4 stages, momentum 0.9: exit 4 (got $rc)" test "$rc" = 4
expect "... names stage, layer and step" grep -qE "non-finite gradient on stage [0-3] \(rank [0-3]\), layer [0-9]+ '[a-z_0-9]+', microbatch [0-9]+ of step [0-9]+" "$out/diverge.log"
expect "... and the likely cause: stale gradients with momentum" \
  grep -q "^likely cause: pipedream applies gradients computed on weights up to 3 updates old (K-1 on 4 stages); with momentum 0.9 (train.momentum) such a step is stable only for a small enough learning rate" "$out/diverge.log"
expect "... and the remedy" \
  grep -q '^remedy: lower train.lr (now 0.05) or train.momentum (now 0.9.*or use a flush schedule (parallel.schedule = "1f1b"' "$out/diverge.log"
grep -h -A2 "^rank [0-9]: non-finite" "$out/diverge.log" | cut -c1-160 | sed 's/^/    /'
# a flush schedule's non-finite gradient (injected) has no such cause attached
PIPETRAIN_FAULT=nan:stage=1:step=3 timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train $deck "${common[@]}" \
  --set 'parallel.split=[3]' --set parallel.schedule=1f1b --set run.name=nan_1f1b --set run.plots=false >"$out/nan_1f1b.log" 2>&1
rc=$?
expect "1f1b with a NaN: exit 4 (got $rc), without a stale-gradient cause" \
  bash -c "test $rc = 4 && grep -q 'non-finite gradient on stage 1' '$out/nan_1f1b.log' && ! grep -q 'likely cause' '$out/nan_1f1b.log'"
# check and plan warn before training
"$PT_BIN" check $deck --set 'parallel.split=[2,4,5]' --set parallel.schedule=pipedream --ranks 4 >"$out/check_async.txt" 2>&1
expect "check warns: pipedream on 4 stages with momentum 0.9" \
  grep -q "^warning: pipedream applies gradients computed on weights up to 3 updates old (K-1 on 4 stages), with train.momentum = 0.9" "$out/check_async.txt"
"$PT_BIN" check $deck --set 'parallel.split=[2,4,5]' --set parallel.schedule=pipedream --set train.momentum=0 --ranks 4 >"$out/check_m0.txt" 2>&1
expect "... not with momentum 0" bash -c "! grep -q '^warning' '$out/check_m0.txt'"
"$PT_BIN" check $deck --set 'parallel.split=[2,4,5]' --set parallel.schedule=1f1b --ranks 4 >"$out/check_1f1b.txt" 2>&1
expect "... nor for 1f1b" bash -c "! grep -q '^warning' '$out/check_1f1b.txt'"

# memory: versions held per stage follow the formulas (pipedream K-s, 2bw 2, flush 1)
versions_of() { grep -o '"weight_versions": [0-9]*' "$1/summary.json" | awk '{printf "%s ", $2}'; }
v=$(versions_of "$out/4x1_pipedream"); expect "pipedream K=4 holds 4 3 2 1 versions (got $v)" test "$v" = "4 3 2 1 "
v=$(versions_of "$out/4x1_2bw"); expect "2bw holds 2 versions per stage (got $v)" test "$v" = "2 2 2 2 "
v=$(versions_of "$out/3st-2-1-1_pipedream"); expect "pipedream 2-1-1 holds 2 2 2 1 versions (got $v)" test "$v" = "2 2 2 1 "
train "$out" 4x1_1f1b 4 $deck "${common[@]}" --set 'parallel.split=[2,4,5]' --set parallel.schedule=1f1b
v=$(versions_of "$out/4x1_1f1b"); expect "1f1b holds 1 version per stage (got $v)" test "$v" = "1 1 1 1 "
fi

# more: the remedy the divergence message names (momentum 0) trains the same 200 steps
if in_more; then
train "$out" diverge_m0 4 $deck "${div[@]}" --set train.momentum=0 &&
  expect "the remedy works: momentum 0 trains the 200 steps (accuracy $(json_number "$out/diverge_m0/summary.json" final_test_accuracy))" \
    grep -q '"steps": 200,' "$out/diverge_m0/summary.json"
fi
finish
