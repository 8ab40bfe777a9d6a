#!/usr/bin/env bash
# Bad input under mpirun -np 2: a bad deck, a bad --set, a layout that does not match the
# rank count, and a missing data folder each end the job with exit code 2 (bad input) and a
# located message, before anything is written (no run directory). Deck and layout errors are
# the same on every rank and are printed once, not once per rank. A missing data folder is
# found while opening the data, which every rank does for itself: it is also exit code 2 (as a
# missing deck or HDF5 file), printed by each rank that gets to it before the job is aborted;
# so is a data.seq_len too large for the corpus, located at the deck's key.
# Usage: tests/mpi/deck_errors.sh   (PT_BIN, MPIRUN_FLAGS as set by tests/run_tests.sh)
set -u
cd "$(dirname "$0")/../.."
PT_BIN=${PT_BIN:-build/pipetrain}
MPIRUN_FLAGS=${MPIRUN_FLAGS:---allow-run-as-root --oversubscribe}
export OMPI_MCA_rmaps_base_oversubscribe=1
failures=0
tmp=$(mktemp -d /tmp/pt_deck_errors.XXXXXX)
trap '[ -n "${PT_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

check() {  # description, command...
  local what=$1; shift
  if "$@"; then echo "  ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

# A small valid deck (synthetic data: no files needed). Line numbers are used below.
cat >"$tmp/good.toml" <<EOF
[run]
name = "good"
output_dir = "$tmp/out"

[data]
source = "synthetic"
shape = [8]
classes = 4
train_samples = 64
test_samples = 16

[model]
[[model.layers]]
type = "linear"
out = 16
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 4
[[model.layers]]
type = "softmax_cross_entropy"

[train]
batch_size = 8
lr = 0.1
max_steps = 2
log_every = 1

[parallel]
split = [2]
EOF
# line 26 is "lr = 0.1", line 25 "batch_size = 8", line 31 "split = [2]"
sed '26s/.*/lrr = 0.1/' "$tmp/good.toml" >"$tmp/unknown_key.toml"
sed '25s/.*/batch_size = "big"/' "$tmp/good.toml" >"$tmp/wrong_type.toml"
sed '31s/.*/split = [2]\nreplicas = [1, 2]/' "$tmp/good.toml" >"$tmp/layout.toml"
cat >"$tmp/fashion.toml" <<EOF
[run]
name = "fashion"
output_dir = "$tmp/out"
[data]
source = "fashion-mnist"
[model]
[[model.layers]]
type = "flatten"
[[model.layers]]
type = "linear"
out = 10
[[model.layers]]
type = "softmax_cross_entropy"
[train]
max_steps = 2
EOF

# run NAME DECK [args...]: mpirun -np 2 train; sets rc and log
run() {
  local name=$1 deck=$2; shift 2
  log="$tmp/$name.log"
  timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train "$deck" "$@" >"$log" 2>&1
  rc=$?
  echo "  $name: exit $rc; $(grep -m1 -E "key '|TOML|error" "$log")"
}

count() { grep -cF -- "$2" "$1"; }  # LOG FIXED-STRING -> number of lines holding it

expect_bad_deck() {  # name deck message [args...]: exit 2, message printed exactly once, nothing written
  local name=$1 deck=$2 msg=$3; shift 3
  rm -rf "$tmp/out"
  run "$name" "$deck" "$@"
  check "$name: exit code 2" test "$rc" -eq 2
  check "$name: message printed exactly once: $msg" test "$(count "$log" "$msg")" -eq 1
  check "$name: one 'bad input (exit code 2)' line" test "$(count "$log" "pipetrain: bad input (exit code 2)")" -eq 1
  check "$name: no run directory written" test ! -e "$tmp/out"
}

echo "control: the good deck trains and writes its run directory"
rm -rf "$tmp/out"
run good "$tmp/good.toml"
check "good: exit code 0" test "$rc" -eq 0
check "good: run directory created" test -f "$tmp/out/good/deck.toml"

echo "bad decks"
expect_bad_deck unknown_key "$tmp/unknown_key.toml" \
  "$tmp/unknown_key.toml:26:1: key 'train.lrr': unknown key; did you mean 'train.lr'?"
expect_bad_deck wrong_type "$tmp/wrong_type.toml" \
  "$tmp/wrong_type.toml:25:14: key 'train.batch_size': must be an integer, got \"big\" (string)"
expect_bad_deck layout "$tmp/layout.toml" \
  "$tmp/layout.toml:32:12: key 'parallel.replicas': [1, 2] places 3 ranks (their sum), but the job has 2 (mpirun -np 2)"
expect_bad_deck set_unknown_key "$tmp/good.toml" \
  "command line '--set train.lrr=1': key 'train.lrr': unknown key; did you mean 'train.lr'?" --set train.lrr=1
expect_bad_deck set_wrong_type "$tmp/good.toml" \
  "command line '--set train.epochs=two': key 'train.epochs': must be an integer, got \"two\" (string)" --set train.epochs=two

echo "missing data folder (exit code 2, reported by the ranks that open the data)"
rm -rf "$tmp/out"
run missing_data "$tmp/fashion.toml" --set data.path=/nonexistent
msg="command line '--set data.path=/nonexistent': key 'data.path': '/nonexistent' is not a folder"
check "missing_data: exit code 2" test "$rc" -eq 2
check "missing_data: message names the --set and the folder" test "$(count "$log" "$msg")" -ge 1
check "missing_data: at most once per rank" test "$(count "$log" "$msg")" -le 2
check "missing_data: no run directory written" test ! -e "$tmp/out"

echo "oversized data.seq_len (found while opening the data: located at the deck's key)"
head -c 3000 /usr/share/games/fortunes/food >"$tmp/corpus.txt" 2>/dev/null || printf '%03000d' 0 >"$tmp/corpus.txt"
cat >"$tmp/text.toml" <<EOF
[run]
name = "text"
output_dir = "$tmp/out"
[data]
source = "text"
path = "$tmp/corpus.txt"
seq_len = 4096
[model]
[[model.layers]]
type = "embedding"
name = "tok"
dim = 8
[[model.layers]]
type = "lm_head"
tie = "tok"
[train]
max_steps = 2
batch_size = 4
EOF
rm -rf "$tmp/out"
run seq_len "$tmp/text.toml"
msg="$tmp/text.toml:7:11: key 'data.seq_len': $tmp/corpus.txt: a text corpus of 3000 bytes is too small for data.seq_len = 4096"
check "seq_len: exit code 2" test "$rc" -eq 2
check "seq_len: message names the deck's file:line" test "$(count "$log" "$msg")" -ge 1
check "seq_len: at most once per rank" test "$(count "$log" "$msg")" -le 2
check "seq_len: no run directory written" test ! -e "$tmp/out"

# `plan` on one process with no network model (no --bandwidth, no [[cluster.levels]]) says so
# before it profiles anything: within seconds, exit 2.
start=$(date +%s)
timeout --kill-after=5 60 "$PT_BIN" plan "$tmp/good.toml" --ranks 2 >"$tmp/plan.log" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
check "plan without a network model: exit code 2" test "$rc" -eq 2
check "plan without a network model: says so" grep -q "no network model: pass --bandwidth" "$tmp/plan.log"
check "plan without a network model: nothing profiled" bash -c "! grep -q 'measuring' '$tmp/plan.log'"
check "plan without a network model: within 20 s ($secs s)" test "$secs" -le 20

if [ "$failures" = 0 ]; then echo "all checks passed"; exit 0; fi
echo "$failures check(s) failed"
exit 1
