#!/usr/bin/env bash
# A resumed run's outputs (docs/CHECKPOINT.md, "Resume"): summary.json carries the whole
# run's figures, not only those of the part since the resume: a run finished at step 10 and
# resumed to step 20, and one stopped at step 5 (--stop-at-step) and resumed, report the final
# losses, accuracy, steps and epochs of an uninterrupted 20-step run, a time to target and a
# training time that count every part, and samples/s over the whole run. Resuming a finished
# run has nothing left to do: it says so, exits 0 and leaves every file of the run (outputs and
# checkpoints) byte for byte as it was.
set -u
source "$(dirname "$0")/lib.sh"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "  skip: Fashion-MNIST is not installed (make deps)"
  exit 0
fi
out=$(mktemp -d /tmp/pt_resume_out.XXXXXX)
trap 'rm -rf "$out"' EXIT
mlp=(input/fashion_mlp.toml --set run.output_dir="$out" --set train.eval_batch_size=2000 --set train.log_every=5
     --set parallel.microbatches=4 --set 'parallel.split=[3]' --set train.eval_every=10 --set train.target_accuracy=0.6)

# whole_run FULL RESUMED PART: the resumed run's summary against the uninterrupted one's
whole_run() {
  python3 - "$1/summary.json" "$2/summary.json" "$3" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [k for k in ("status", "steps", "epochs", "final_train_loss", "final_test_loss", "final_test_accuracy") if a[k] != b[k]]
bad += [] if b["resumed_from_step"] == int(sys.argv[3]) and b["steps_this_run"] == 20 - int(sys.argv[3]) else ["resumed_from_step"]
t = b["time_to_target_s"]
bad += [] if t is not None and 0 < t <= b["train_wall_s"] else ["time_to_target_s"]
sps = b["steps"] * b["batch_size"] / b["train_wall_s"]
bad += [] if abs(b["samples_per_s"] - sps) <= 1e-9 * sps else ["samples_per_s"]
print("    " + ("differs: " + ", ".join(bad) if bad else "final losses, accuracy, steps, epochs, time to target and samples/s of the whole run"))
sys.exit(1 if bad else 0)
PY
}

train "$out" full 2 "${mlp[@]}" --set train.max_steps=20
# finished at step 10 (train_wall_s of that part kept), then resumed to step 20
train "$out" fin 2 "${mlp[@]}" --set train.max_steps=10
first=$(json_number "$out/fin/summary.json" train_wall_s)
train "$out" fin 2 "${mlp[@]}" --set train.max_steps=20 --resume "$out/fin"
expect "finished then resumed: summary.json has the whole run's figures" whole_run "$out/full" "$out/fin" 10
expect "finished then resumed: train_wall_s counts both parts (> $first)" \
  awk -v a="$(json_number "$out/fin/summary.json" train_wall_s)" -v b="$first" 'BEGIN { exit !(a > b) }'
expect "finished then resumed: every step's logged loss is the uninterrupted run's" \
  bash -c "diff <(grep '\"type\":\"step\"' '$out/full/metrics.jsonl' | grep -o '\"loss\":[^,]*') \
                <(grep '\"type\":\"step\"' '$out/fin/metrics.jsonl' | grep -o '\"loss\":[^,]*') >/dev/null"
# stopped at step 5 inside the segment, then resumed
train "$out" stop 2 "${mlp[@]}" --set train.max_steps=20 --stop-at-step 5
train "$out" stop 2 "${mlp[@]}" --set train.max_steps=20 --resume "$out/stop"
expect "stopped then resumed: summary.json has the whole run's figures" whole_run "$out/full" "$out/stop" 5

# a finished run resumed: nothing to do, exit 0, every file unchanged
(cd "$out/fin" && find . -type f | sort | xargs md5sum) >"$out/before.md5"
timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train "${mlp[@]}" --set run.name=fin --set train.max_steps=20 \
  --resume "$out/fin" >"$out/again.log" 2>&1
rc=$?
(cd "$out/fin" && find . -type f | sort | xargs md5sum) >"$out/after.md5"
expect "resuming a finished run exits 0 (got $rc)" test "$rc" = 0
expect "it says there is nothing left to do" grep -q "^resume: nothing left to do: .*step_000000000020 is at step 20 and this run ends at step 20" "$out/again.log"
expect "the run's files are byte for byte as they were ($(wc -l <"$out/before.md5") files)" cmp -s "$out/before.md5" "$out/after.md5"
finish
