#!/usr/bin/env bash
# The checkpoint fault matrix of FAULTS.md, rows 8, 9, 12-17, 21, 25-29 (rows 10-11, hangs, are
# tests/mpi/rank_failures.sh; row 29 is also tests/unit/test_checkpoint.cpp, which crafts
# datasets declaring 2^32 elements). The job is pipedream on 2 stages (stashed weight versions,
# microbatches and messages in flight at every cut), 20 steps, a checkpoint every 5 steps.
# Every resume is compared bitwise with the uninterrupted run. Faults come from the test-only
# PIPETRAIN_FAULT hook, byte flips, truncate, rm, a full tmpfs and a read-only tmpfs.
# make test runs rows 8, 9 (three of its six commit phases), 12-15, 17 and 21; make test-more
# the other three phases and rows 16 and 25-27 (tests/mpi/lib.sh: PT_TESTS); make test-faults
# all of it.
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_ckpt_faults.XXXXXX)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$out"
}
trap cleanup EXIT
deck=input/fashion_mlp.toml
base=(--set run.output_dir="$out" --set run.plots=false --set train.eval_batch_size=2000 --set train.log_every=1 --set parallel.schedule=pipedream
      --set 'parallel.split=[3]' --set train.max_steps=20 --set checkpoint.every_steps=5 --set run.comm_timeout_s=30)

# pt LOG FAULT ARGS...: a 2-rank training run with PIPETRAIN_FAULT=FAULT ("" = none); sets rc, secs
pt() {
  local log=$1 fault=$2 t0; shift 2
  last=$log t0=$(date +%s.%N)
  PIPETRAIN_FAULT=$fault timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train $deck "${base[@]}" "$@" \
    >"$out/$log.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
stepdir() { printf 'step_%012d' "$1"; }
committed() { (cd "$1" 2>/dev/null && for d in step_*; do [ -f "$d/manifest.json" ] && echo "${d#step_}"; done) | sed 's/^0*//' | tr '\n' ' '; }
ok_run() {
  if [ "$rc" = 0 ]; then return 0; fi
  echo "FAIL $1 exited $rc:"; tail -8 "$out/$last.log"; failures=$((failures + 1)); return 1
}
has() { grep -qE -- "$2" "$out/$1.log" || { echo "    (not in $1.log: $2)"; tail -5 "$out/$1.log" | sed 's/^/    | /'; return 1; }; }
# inspect_ok DIR NEWEST: every listed checkpoint verifies and the newest is step NEWEST
inspect_ok() {
  "$PT_BIN" inspect "$1" >"$out/inspect.txt" 2>&1 || { echo "    inspect $1 failed:"; grep -A3 INVALID "$out/inspect.txt" | sed 's/^/    | /'; return 1; }
  sed -n 3p "$out/inspect.txt" | grep -q "$(stepdir "$2")\$" || { echo "    newest is $(sed -n 3p "$out/inspect.txt")"; return 1; }
}
flip_byte() {  # FILE OFFSET: xor one byte with 0x5a
  local b
  b=$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
  printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$1" bs=1 seek="$2" count=1 conv=notrunc 2>/dev/null
}
data_offset() {  # FILE DATASET: file offset of a byte in the middle of the dataset's stored data
  local raw="$out/raw.bin" half pat
  h5dump -d "$2" -b LE -o "$raw" "$1" >/dev/null 2>&1 || return 1
  half=$(( $(stat -c %s "$raw") / 2 ))
  pat=$(dd if="$raw" bs=1 skip="$half" count=16 2>/dev/null | od -An -tx1 | tr -d ' \n' | sed 's/../\\x&/g')
  LC_ALL=C grep -obUaP "$pat" "$1" | head -1 | cut -d: -f1
}

# ---- the uninterrupted reference ----------------------------------------------------------
pt ref "" --set run.name=ref
ok_run "reference run" || finish
ref_secs=$secs
echo "  reference: 20 steps in ${ref_secs}s, committed: $(committed "$out/ref/checkpoints")"

# resume_matches NAME: resume run NAME into its own directory; reaches the reference bitwise
resume_matches() {
  pt "$1_resume" "" --set run.name="$1" --resume "$out/$1" "${@:2}"
  ok_run "resume of $1" || return 1
  compare "$out/ref" "$out/$1" 0
}

if in_core; then
# ---- row 8: one rank SIGKILLed mid-training -----------------------------------------------
pt kill "kill:rank=1:step=12" --set run.name=kill
echo "  kill: exit $rc after ${secs}s"
expect "row 8: SIGKILL of rank 1 at step 12 ends the job non-zero (got $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
expect "row 8: within seconds (${secs}s; uninterrupted run ${ref_secs}s)" awk -v s="$secs" -v r="$ref_secs" 'BEGIN { exit !(s < r + 15) }'
expect "row 8: step 10 is the newest committed and verifies" inspect_ok "$out/kill" 10
resume_matches kill
expect "row 8: resumed from step 10" has kill_resume "resuming from .*$(stepdir 10) \(step 10"

fi

# ---- rows 9 and 28: SIGKILL at each phase of the commit protocol (keep 1) -------------------
# written/renamed: a non-zero rank between its HDF5 close and its fsync+rename, and after the
# rename; agreed/manifest: rank 0 after the gather, and with manifest.json.tmp written but not
# renamed; committed: after the rename (the new checkpoint is the committed one); prune: after
# the older checkpoint's manifest was removed but not its files (keep 1 still leaves one).
# make test kills in three phases (written, agreed, committed), make test-more in the other three
for spec in written:1:5:core renamed:1:5:more agreed:0:5:core manifest:0:5:more committed:0:10:core prune:0:10:more; do
  IFS=: read -r phase r want part <<<"$spec"
  in_$part || continue
  name=phase_$phase
  pt "$name" "ckpt-kill:rank=$r:phase=$phase:step=10" --set run.name="$name" --set checkpoint.keep=1
  expect "row 9 $phase: the job ends non-zero within seconds (exit $rc, ${secs}s)" \
    awk -v rc="$rc" -v s="$secs" -v r="$ref_secs" 'BEGIN { exit !(rc != 0 && rc != 124 && s < r + 15) }'
  expect "row 9 $phase: killed in that phase" has "$name" "rank $r: injected SIGKILL in checkpoint phase '$phase' at step 10"
  expect "row 9 $phase: step $want is the newest committed checkpoint, and every listed one verifies" inspect_ok "$out/$name" "$want"
  if [ "$want" = 5 ]; then
    expect "row 9 $phase: the partial step 10 has no manifest" test ! -e "$out/$name/checkpoints/$(stepdir 10)/manifest.json"
  fi
  [ "$phase" = prune ] && expect "row 28: a kill while pruning (keep 1) leaves exactly one committed checkpoint: $(committed "$out/$name/checkpoints")" \
    test "$(committed "$out/$name/checkpoints")" = "10 "
  [ "$phase" = committed ] && expect "row 9 committed: the stale 'latest' pointer (step 5) does not matter" \
    grep -qx "$(stepdir 5)" "$out/$name/checkpoints/latest"
  resume_matches "$name" --set checkpoint.keep=1
  expect "row 9 $phase: resumed from step $want" has "${name}_resume" "resuming from .*$(stepdir "$want") \(step $want"
  if [ "$want" = 5 ]; then
    expect "row 9 $phase: the partial folder is cleaned" has "${name}_resume" "removing uncommitted checkpoint leftover .*$(stepdir 10)"
  fi
done

# ---- rows 12-15: corruption; fallback to the previous committed checkpoint -------------------
# the stopped run that rows 12-15 and 25-26 damage copies of (both parts)
pt corr "" --set run.name=corr --stop-at-step 10
ok_run "run stopped at step 10 (checkpoints 5 and 10)"
corrupt() {  # NAME: a copy of the stopped run to damage
  rm -rf "$out/$1"; cp -a "$out/corr" "$out/$1"
  s10="$out/$1/checkpoints/$(stepdir 10)"
}
if in_core; then
# after_corruption NAME ROW MESSAGE-REGEX: inspect reports it, resume says it and falls back to step 5
after_corruption() {
  "$PT_BIN" inspect "$out/$1" >"$out/$1.inspect" 2>&1
  local irc=$?
  expect "row $2 $1: inspect exits 2 and reports it (got $irc)" \
    bash -c "test $irc = 2 && grep -qE -- \"\$0\" '$out/$1.inspect'" "$3"
  echo "  $1: $(awk '/INVALID:$/ {getline; print; exit} /INVALID: / {sub(/.*INVALID: /, ""); print; exit}' "$out/$1.inspect" | sed -e "s|$out/||g" -e "s/^ *//")"
  resume_matches "$1"
  expect "row $2 $1: the resume names the problem, once" \
    bash -c "grep -qE -- \"\$0\" '$out/$1_resume.log' && test \$(grep -c 'is not usable' '$out/$1_resume.log') = 1" "$3"
  expect "row $2 $1: ... skips step 10 and resumes from step 5" \
    bash -c "grep -q 'skipping .*$(stepdir 10); trying an older checkpoint' '$out/$1_resume.log' &&
             grep -q 'resuming from .*$(stepdir 5) (step 5' '$out/$1_resume.log'"
}
corrupt flip_data
off=$(data_offset "$s10/rank_00001.h5" /stage_1/optimizer/momentum)
if [ -n "$off" ]; then
  flip_byte "$s10/rank_00001.h5" "$off"
  after_corruption flip_data 12 "$s10/rank_00001.h5: dataset /stage_1/optimizer/momentum fails its Fletcher32 checksum.* \(rank 1\)"
else
  echo "FAIL could not locate /stage_1/optimizer/momentum's data in the file"; failures=$((failures + 1))
fi
corrupt flip_header
flip_byte "$s10/rank_00000.h5" 30  # inside the superblock (checksummed: newest format)
after_corruption flip_header 13 "$s10/rank_00000.h5: HDF5 metadata corrupt .* \(rank 0\)"
corrupt flip_attr
off=$(LC_ALL=C grep -obUa "pipetrain-checkpoint" "$s10/rank_00001.h5" | head -1 | cut -d: -f1)
flip_byte "$s10/rank_00001.h5" $((off + 3))  # the value of the "format" attribute: an object header
after_corruption flip_attr 13 "$s10/rank_00001.h5: HDF5 metadata corrupt .* \(rank 1\)"
corrupt truncated
truncate -s -4096 "$s10/rank_00001.h5"
after_corruption truncated 14 "$s10/rank_00001.h5 \(rank 1\): size [0-9]+ bytes differs from the manifest's [0-9]+"
corrupt missing_file
rm "$s10/rank_00000.h5"
after_corruption missing_file 15 "$s10/rank_00000.h5 \(rank 0\): missing"
corrupt empty_manifest
: >"$s10/manifest.json"
after_corruption empty_manifest 15 "$s10/manifest.json: empty"
corrupt corrupt_manifest
head -c 300 "$out/corr/checkpoints/$(stepdir 10)/manifest.json" >"$s10/manifest.json"
after_corruption corrupt_manifest 15 "$s10/manifest.json: corrupt \(not valid JSON"
corrupt missing_manifest
rm "$s10/manifest.json"
resume_matches missing_manifest
expect "row 15 missing manifest: named, and step 5 resumed" \
  bash -c "grep -q 'ignoring $s10: no manifest.json' '$out/missing_manifest_resume.log' &&
           grep -q 'resuming from .*$(stepdir 5) (step 5' '$out/missing_manifest_resume.log'"
# nothing valid left: exit 6 naming what was tried
corrupt none_valid
truncate -s -4096 "$s10/rank_00001.h5"
rm "$out/none_valid/checkpoints/$(stepdir 5)/rank_00000.h5"
pt none_valid_resume "" --set run.name=none_valid --resume "$out/none_valid"
expect "no valid checkpoint: exit 6 (got $rc)" test "$rc" = 6
expect "... listing both tried" has none_valid_resume "no committed checkpoint passed verification; tried"
expect "... and touching nothing" test -f "$s10/rank_00000.h5" -a -f "$s10/manifest.json"
pt nothing_resume "" --set run.name=nothing --resume "$out/no_such_run"
expect "--resume of a folder without checkpoints: exit 6 (got $rc)" test "$rc" = 6

fi

# more: rows 25-27 and 16 (make test-more)
if in_more; then
# ---- rows 25-26: stale temporaries and uncommitted folders; a garbage `latest` ---------------
corrupt stale
ck="$out/stale/checkpoints"
mkdir "$ck/$(stepdir 99)" && cp "$s10"/rank_*.h5 "$ck/$(stepdir 99)/"  # newer, never committed
mkdir "$ck/$(stepdir 50).tmp" && cp "$s10/manifest.json" "$ck/$(stepdir 50).tmp/"
echo partial >"$ck/rank_00000.h5.tmp"
cp "$s10/manifest.json" "$s10/manifest.json.tmp"
: >"$ck/latest"
resume_matches stale
expect "row 25: resumed from step 10, not the uncommitted 99" has stale_resume "resuming from .*$(stepdir 10) \(step 10"
expect "row 25: stale items are cleaned" \
  test ! -e "$ck/$(stepdir 99)" -a ! -e "$ck/$(stepdir 50).tmp" -a ! -e "$ck/rank_00000.h5.tmp" -a ! -e "$s10/manifest.json.tmp"
corrupt latest
printf 'step_000000000099\n\x00\xff garbage' >"$out/latest/checkpoints/latest"
resume_matches latest
expect "row 26: a garbage 'latest' pointer is ignored (resumed from step 10)" has latest_resume "resuming from .*$(stepdir 10) \(step 10"

# ---- row 27: checkpoint directory unwritable, found before step 1 ---------------------------
touch "$out/a_file"
pt unwritable "" --set run.name=unwritable --set checkpoint.dir="$out/a_file/ck"
expect "row 27: a checkpoint.dir under a regular file: exit 3 (got $rc)" test "$rc" = 3
expect "row 27: ... naming the path and errno, once" \
  bash -c "test \$(grep -c 'checkpoint directory unusable (checkpoint.dir): $out/a_file/ck: cannot create directory: Not a directory' '$out/unwritable.log') = 1"
expect "row 27: ... before step 1" bash -c "! grep -q '^step 1/' '$out/unwritable.log'"
ro="$out/ro"; mkdir -p "$ro"
if mount -t tmpfs -o ro,size=1M tmpfs "$ro" 2>/dev/null; then
  mounts+=("$ro")
  pt readonly "" --set run.name=readonly --set checkpoint.dir="$ro/ck"
  expect "row 27: a read-only checkpoint.dir: exit 3 before step 1 naming it (got $rc)" \
    bash -c "test $rc = 3 && grep -q '$ro/ck: cannot create directory: Read-only file system' '$out/readonly.log' && ! grep -q '^step 1/' '$out/readonly.log'"
else
  echo "  note: mounting a read-only tmpfs is not permitted here; chmod 000 does not stop root (row 27 checked with a file as parent)"
fi

# ---- row 16: disk full during a checkpoint (a tmpfs that holds one checkpoint and a half) ----
full="$out/full"; mkdir -p "$full"
kb=$(du -sk "$out/corr/checkpoints/$(stepdir 5)" | cut -f1)
if mount -t tmpfs -o size=$((kb * 3 / 2))k tmpfs "$full" 2>/dev/null; then
  mounts+=("$full")
  pt disk_full "" --set run.name=disk_full --set checkpoint.dir="$full/ck" --set checkpoint.keep=3
  echo "  disk full (tmpfs of $((kb * 3 / 2)) KiB, a checkpoint takes $kb KiB): exit $rc; $(grep -m1 -E '^rank [0-9]+:' "$out/disk_full.log")"
  expect "row 16: disk full: exit 3 (got $rc)" test "$rc" = 3
  expect "row 16: ... naming the file and errno" has disk_full "^rank [0-9]: $full/ck/$(stepdir 10)/rank_0000[01]\.h5\.tmp: .*errno 28: No space left on device"
  expect "row 16: nothing committed at step 10; step 5 intact and verified" \
    bash -c "test ! -e '$full/ck/$(stepdir 10)/manifest.json' && '$PT_BIN' inspect '$full/ck' >/dev/null"
  pt disk_full_resume "" --set run.name=disk_full --set checkpoint.dir="$out/disk_full/ck" --resume "$full/ck"
  ok_run "resume after disk full" && compare "$out/ref" "$out/disk_full" 0
else
  echo "  note: mounting a tmpfs is not permitted here: disk full is covered by the injected I/O error only"
fi

fi

if in_core; then
# ---- row 17: an injected write error on one rank --------------------------------------------
pt io "ckpt-io:rank=1:step=10" --set run.name=io
expect "row 17: injected I/O error: exit 3 (got $rc)" test "$rc" = 3
expect "row 17: ... naming rank, file and errno" has io "^rank 1: .*/$(stepdir 10)/rank_00001\.h5\.tmp: write failed: errno 5: Input/output error"
expect "row 17: nothing committed at step 10, step 5 verifies" \
  bash -c "test ! -e '$out/io/checkpoints/$(stepdir 10)/manifest.json' && '$PT_BIN' inspect '$out/io' >/dev/null"

# ---- row 21: NaN injected at stage 1, step 8 ------------------------------------------------
pt nan_abort "nan:stage=1:step=8" --set run.name=nan_abort --set train.nonfinite=abort
expect "row 21 abort: exit 4 (got $rc)" test "$rc" = 4
expect "row 21 abort: names stage, layer, microbatch and step" \
  has nan_abort "non-finite gradient on stage 1 \(rank 1\), layer [0-9]+ '[a-z_0-9]+', microbatch [0-9]+ of step [0-9]+"
expect "row 21 abort: nothing committed after it (only step 5)" test "$(committed "$out/nan_abort/checkpoints")" = "5 "
pt nan_skip "nan:stage=1:step=8" --set run.name=nan_skip --set train.nonfinite=skip
ok_run "NaN with skip"
pt nan_skip2 "nan:stage=1:step=8" --set run.name=nan_skip2 --set train.nonfinite=skip
ok_run "NaN with skip, again"
expect "row 21 skip: summary.json counts the skipped update" grep -qE '"skipped_updates": [1-9]' "$out/nan_skip/summary.json"
expect "row 21 skip: the log marks step 8" has nan_skip "^step 8/20 .*update skipped"
compare "$out/nan_skip" "$out/nan_skip2" 0
same_losses "$out/nan_skip" "$out/nan_skip2"
if "$PT_BIN" compare "$out/ref" "$out/nan_skip" --rtol 0 --quiet >/dev/null 2>&1; then
  echo "FAIL row 21 skip: the skipped update changed nothing"; failures=$((failures + 1))
fi
expect "row 21 skip: its checkpoints (commit refuses non-finite state) verify" bash -c "'$PT_BIN' inspect '$out/nan_skip' >/dev/null"
fi
finish
