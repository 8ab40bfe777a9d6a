#!/usr/bin/env bash
# PipeDream's asynchronous schedules against the sequential emulator: for layouts 2x1, 4x1
# and 3 stages with replicas 2-1-1, and each of pipedream, pipedream-vsync and 2bw, 30 steps
# of the MLP give the emulator's weights within 1e-5 relative, and a repeated run is bitwise
# identical. The version log shows the stashing rules (and their violation without
# stashing); summary.json reports the weight versions each stage held.
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
  "2x1 2 [3] [1,1]"
  "4x1 4 [2,4,5] [1,1,1,1]"
  "3st-2-1-1 4 [2,4] [2,1,1]"
)
for l in "${layouts[@]}"; do
  read -r name np split reps <<<"$l"
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

# memory: versions held per stage follow the formulas (pipedream K-s, 2bw 2, flush 1)
versions_of() { grep -o '"weight_versions": [0-9]*' "$1/summary.json" | awk '{printf "%s ", $2}'; }
v=$(versions_of "$out/4x1_pipedream"); expect "pipedream K=4 holds 4 3 2 1 versions (got $v)" test "$v" = "4 3 2 1 "
v=$(versions_of "$out/4x1_2bw"); expect "2bw holds 2 versions per stage (got $v)" test "$v" = "2 2 2 2 "
v=$(versions_of "$out/3st-2-1-1_pipedream"); expect "pipedream 2-1-1 holds 2 2 2 1 versions (got $v)" test "$v" = "2 2 2 1 "
train "$out" 4x1_1f1b 4 $deck "${common[@]}" --set 'parallel.split=[2,4,5]' --set parallel.schedule=1f1b
v=$(versions_of "$out/4x1_1f1b"); expect "1f1b holds 1 version per stage (got $v)" test "$v" = "1 1 1 1 "
finish
