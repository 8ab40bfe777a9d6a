#!/usr/bin/env bash
# A rank that fails mid-run ends the whole job with a message naming it, and nothing hangs:
# an injected error (exit code 1 via MPI_Abort), a SIGKILLed rank (mpirun ends the job), and
# a rank that stops answering (its peer's deadline, run.comm_timeout_s, names the action,
# microbatch and peer; exit code 5). Faults come from the test-only PIPETRAIN_FAULT hook.
# "Nothing hangs" is bounded by this machine's own time for the same run without a fault (R),
# measured first: a fault run may take R, plus the deadline where there is one, plus 15 s for
# Open MPI to end the job; no fixed number of seconds.
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_fail.XXXXXX)
trap 'rm -rf "$out"' EXIT
args=(input/fashion_mlp.toml --set 'parallel.split=[3]' --set parallel.schedule=1f1b --set train.max_steps=40
      --set run.output_dir="$out" --set run.comm_timeout_s=5 --set checkpoint.at_end=false --set run.plots=false)

run_fault() {  # name fault limit -> sets rc, secs, log
  local name=$1 fault=$2 limit=$3 t0
  t0=$(date +%s.%N)
  PIPETRAIN_FAULT=$fault timeout --kill-after=5 "$limit" mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train "${args[@]}" \
    --set run.name="$name" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  log="$out/$name.log"
  echo "  $name: exit $rc after ${secs}s; $(grep -m1 -E '^rank [0-9]+:' "$log")"
}

run_fault reference "" 120
expect "the reference run without a fault trains (exit $rc)" test "$rc" -eq 0
R=$secs
run_fault error "error:rank=1:step=5" 120
expect "injected error ends the job non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
expect "message names rank 1" grep -q "^rank 1: .*injected fault" "$log"

run_fault kill "kill:rank=0:step=5" 120
expect "killed rank ends the job non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
expect "ended within the unfaulted run's ${R}s + 15 s" awk -v s="$secs" -v r="$R" 'BEGIN { exit !(s < r + 15) }'

run_fault hang "hang:rank=1:step=3" 120
expect "hung peer is reported by the deadline (exit 5)" test "$rc" -eq 5
expect "the report names action, microbatch and peer" grep -qE "waiting for (RECV_GRAD|RECV_ACT|SEND_GRAD|ALLREDUCE).* mb [0-9]+.*(from rank 1|rank 0)" "$log"
expect "within the unfaulted run's ${R}s + the 5 s deadline + 15 s" awk -v s="$secs" -v r="$R" 'BEGIN { exit !(s < r + 5 + 15) }'
finish
