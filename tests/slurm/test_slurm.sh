#!/usr/bin/env bash
# The Slurm job scripts on a real one-node Slurm on localhost (Debian slurm-wlm + munge):
# munged with a generated key (socket in /run/munge, owned by munge), slurmctld and slurmd
# from a generated slurm.conf naming this host at 127.0.0.1 on free non-default ports, all
# state, spool and logs under a temporary directory, SLURM_CONF private. Then:
#   1. train.sbatch, 2 tasks, the MLP for 30 steps: srun with PMIx (mpirun if srun has none)
#   2. train.sbatch with LAUNCHER=mpirun (the fallback path inside an allocation)
#   3. strong_scaling.sbatch as a job array: 1 and 2 ranks x bsp and 1f1b (4 points)
#   4. strong_scaling.sbatch as job steps: POINTS="1 1f1b; 2 gpipe [3]"
#   5. train.sbatch stopped by `scancel --batch --signal=USR1` (what --signal=B:USR1@120 does):
#      the trap forwards it, pipetrain checkpoints, the script resubmits itself with RESUME,
#      and the second job resumes and completes the run
# and checks job states, job outputs (launcher, per-rank affinity) and run directories
# (summary.json status, steps). The daemons are stopped by pid at the end, also on failure.
# Installs slurm-wlm and munge (as root) when missing; skips (exit 0) when that is impossible.
# Environment: PT_BIN (default build/pipetrain), SLURM_TEST_WAIT (seconds for all jobs, 480),
# SLURM_TEST_KEEP=1 keeps the temporary directory.
set -u
cd "$(dirname "$0")/../.."
source tests/mpi/lib.sh
PT_BIN=$(cd "$(dirname "$PT_BIN")" 2>/dev/null && pwd)/$(basename "$PT_BIN")
WAIT=${SLURM_TEST_WAIT:-480}
t_start=$(date +%s)
skip() { echo "SKIP: localhost Slurm test: $*"; exit 0; }
die() { echo "FAIL: $*"; failures=$((failures + 1)); exit 1; }  # the EXIT trap cleans up

# ---- packages ----------------------------------------------------------------------------
have_all() { local c; for c in slurmctld slurmd sbatch squeue sinfo scontrol scancel srun munged; do command -v "$c" >/dev/null || return 1; done; }
export PATH=$PATH:/usr/sbin:/sbin
if ! have_all; then
  [ "$(id -u)" = 0 ] || skip "slurm-wlm/munge are not installed and installing them needs root"
  command -v apt-get >/dev/null || skip "slurm-wlm/munge are not installed and there is no apt-get"
  echo "installing slurm-wlm and munge (apt-get)"
  apt_log=$(mktemp /tmp/pt_slurm_apt.XXXXXX)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends slurm-wlm munge >"$apt_log" 2>&1 ||
    { apt-get update >>"$apt_log" 2>&1 && apt-get install -y --no-install-recommends slurm-wlm munge >>"$apt_log" 2>&1; } ||
    skip "cannot install slurm-wlm munge: $(tail -2 "$apt_log" | tr '\n' ' ')"
  have_all || skip "slurm-wlm/munge installed but commands are missing"
fi
[ "$(id -u)" = 0 ] || skip "needs root (munged runs as user munge, slurmd as root)"
id munge >/dev/null 2>&1 || skip "no munge user (the munge package creates it)"
[ -x "$PT_BIN" ] || die "$PT_BIN not found: build it first (make, or make test-slurm)"
[ -r /usr/share/datasets/fashion-mnist ] || [ -d /usr/share/datasets/fashion-mnist ] || die "Fashion-MNIST not installed (make deps)"
echo "$(slurmd -V 2>/dev/null), $(munged --version 2>&1 | awk '{print $1}' | head -1), binary $PT_BIN"

# ---- layout, ports ------------------------------------------------------------------------
T=$(mktemp -d /tmp/pt_slurm.XXXXXX)
chmod 755 "$T"
mkdir -p "$T/etc" "$T/state" "$T/spool/slurmd" "$T/log" "$T/munge" "$T/out" "$T/runs"
chown munge:munge "$T/munge" && chmod 700 "$T/munge"
MUNGE_SOCKET=/run/munge/pt_slurm_test.$$.socket
pids=()        # munged slurmctld slurmd, in start order
names=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "${SLURM_CONF:-}" ] && [ ${#pids[@]} -ge 2 ]; then
    local left
    left=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "$left" ]; then
      echo "cleanup: cancelling jobs $left"
      scancel --full $left 2>/dev/null
      for _ in $(seq 30); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 1; done
    fi
  fi
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then echo "cleanup: ${names[$i]} (pid ${pids[$i]}) ignored SIGTERM: SIGKILL"; kill -KILL "${pids[$i]}" 2>/dev/null; fi
    wait "${pids[$i]}" 2>/dev/null
  done
  [ ${#pids[@]} -gt 0 ] && echo "stopped ${names[*]} (pids ${pids[*]})"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  if [ "$rc" != 0 ] || [ "$failures" != 0 ]; then
    local f
    for f in "$T"/log/*.log "$T"/log/*.out; do [ -s "$f" ] && { echo "--- tail of $f"; tail -15 "$f"; }; done
    echo "kept $T for inspection"
  elif [ "${SLURM_TEST_KEEP:-0}" = 1 ]; then
    echo "kept $T"
  else
    rm -rf "$T"
  fi
  echo "localhost Slurm test: $(( $(date +%s) - t_start )) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctld_port=""
for base in $(seq 16817 2 16857); do
  if port_free "$base" && port_free $((base + 1)); then ctld_port=$base; break; fi
done
[ -n "$ctld_port" ] || die "no free port pair in 16817-16858"
d_port=$((ctld_port + 1))

node=$(hostname -s)
cpus=$(nproc)
plugdir=$(dirname "$(ls /usr/lib/*/slurm-wlm/mpi_none.so /usr/lib/slurm-wlm/mpi_none.so /usr/lib*/slurm/mpi_none.so 2>/dev/null | head -1)" 2>/dev/null)
mpi_default=none
for p in pmix_v4 pmix; do [ -e "$plugdir/mpi_$p.so" ] && { mpi_default=$p; break; }; done

# ---- munged --------------------------------------------------------------------------------
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
if command -v mungekey >/dev/null; then
  mungekey --create --keyfile="$T/munge/munge.key" --force >/dev/null 2>&1
fi
[ -s "$T/munge/munge.key" ] || dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chown munge:munge "$T/munge/munge.key" && chmod 400 "$T/munge/munge.key"
setpriv --reuid=munge --regid=munge --init-groups munged --foreground --key-file="$T/munge/munge.key" \
  --socket="$MUNGE_SOCKET" --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" \
  --seed-file="$T/munge/munged.seed" </dev/null >"$T/log/munged.out" 2>&1 &
pids+=($!); names+=(munged)
for _ in $(seq 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.1; done
munge -s pt -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 ||
  die "munged does not answer on $MUNGE_SOCKET: $(tail -3 "$T/log/munged.out" | tr '\n' ' ')"

# ---- slurm.conf, slurmctld, slurmd ------------------------------------------------------------
export SLURM_CONF=$T/etc/slurm.conf
task_plugin=task/affinity
cat >"$SLURM_CONF" <<EOF
# generated by tests/slurm/test_slurm.sh
ClusterName=pttest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/slurmd
SlurmctldPidFile=$T/state/slurmctld.pid
SlurmdPidFile=$T/spool/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
MpiDefault=$mpi_default
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=15
MinJobAge=3600
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -c </dev/null >"$T/log/slurmctld.out" 2>&1 &
pids+=($!); names+=(slurmctld)
slurmd -D -N "$node" </dev/null >"$T/log/slurmd.out" 2>&1 &
pids+=($!); names+=(slurmd)
echo "slurm on $node (127.0.0.1), ports $ctld_port/$d_port, $cpus CPUs, MpiDefault=$mpi_default, $task_plugin, state in $T"
state=""
for _ in $(seq 60); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  for i in 1 2; do kill -0 "${pids[$i]}" 2>/dev/null || die "${names[$i]} exited: $(tail -3 "$T/log/${names[$i]}.out" | tr '\n' ' ')"; done
  sleep 1
done
[ "$state" = idle ] || die "node $node not idle after 60 s (state '${state:-none}')"
echo "  ok   node $node idle after $(( $(date +%s) - t_start )) s; srun --mpi=list: $(srun --mpi=list 2>&1 | grep -v 'MPI plugin' | tr -d '\t' | tr '\n' ' ')"
pmix=0; srun --mpi=list 2>&1 | grep -qE '^[[:space:]]+pmix(_v[0-9]+)?$|versions available:.*pmix_v' && pmix=1

# ---- jobs ------------------------------------------------------------------------------------
# all submitted from the repository root (SLURM_SUBMIT_DIR), outputs in $T/out (--chdir)
submit() { sbatch --parsable --chdir="$T/out" "$@"; }
export PT_BIN OUTPUT_DIR=$T/runs
mlp=input/fashion_mlp.toml

# 5 first, so it is running while we signal it: 400 steps (inside the first epoch), logged every 10
resub=$(DECK=$mlp OVERRIDES="train.max_steps=400 train.log_every=10" MAX_RESUBMITS=1 RUN_NAME=resubmit \
        submit --job-name=pt-resub jobs/slurm/train.sbatch) || die "sbatch train.sbatch (resubmission case) failed"
train=$(DECK=$mlp OVERRIDES="train.max_steps=30" submit jobs/slurm/train.sbatch) || die "sbatch train.sbatch failed"
fallback=$(DECK=$mlp OVERRIDES="train.max_steps=30" LAUNCHER=mpirun RUN_NAME=fallback \
           submit --job-name=pt-mpirun jobs/slurm/train.sbatch) || die "sbatch train.sbatch (LAUNCHER=mpirun) failed"
sweep=$(DECK=$mlp OVERRIDES="train.max_steps=30" RANK_LIST="1 2" SCHEDULES="bsp 1f1b" SWEEP_NAME=sweep \
        submit --array=0-3 jobs/slurm/strong_scaling.sbatch) || die "sbatch strong_scaling.sbatch failed"
steps=$(DECK=$mlp OVERRIDES="train.max_steps=30" POINTS="1 1f1b; 2 gpipe [3]" SWEEP_NAME=steps \
        submit jobs/slurm/strong_scaling.sbatch) || die "sbatch strong_scaling.sbatch (steps) failed"
echo "submitted: train $train, mpirun fallback $fallback, sweep array $sweep (4 tasks), sweep as steps $steps, signal/resubmit $resub"

# signal the running job once pipetrain is past step 10 (its handler is installed by then)
deadline=$(( $(date +%s) + WAIT ))
while ! grep -q '"type":"step"' "$T/runs/resubmit/metrics.jsonl" 2>/dev/null; do
  [ "$(date +%s)" -lt "$deadline" ] || die "job $resub logged no step within $WAIT s"
  sleep 0.2
done
scancel --batch --signal=USR1 "$resub" || die "scancel --batch --signal=USR1 $resub failed"
echo "  sent SIGUSR1 to the batch shell of job $resub at step $(grep -o '"step":[0-9]*' "$T/runs/resubmit/metrics.jsonl" | tail -1 | cut -d: -f2)"

# wait until the queue is empty: the resubmitted job appears while the first ones run
while [ -n "$(squeue -h -o %i)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { squeue; die "jobs still queued or running after $WAIT s"; }
  sleep 2
done
echo "  queue empty after $(( $(date +%s) - t_start )) s"

# ---- checks ----------------------------------------------------------------------------------
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | cut -d= -f2; }
completed() {  # JOBID: every task of it COMPLETED with exit 0:0
  local st ex
  st=$(job_field "$1" JobState | sort -u | tr '\n' ' '); ex=$(job_field "$1" ExitCode | sort -u | tr '\n' ' ')
  echo "  job $1: $st exit $ex"
  [ "$st" = "COMPLETED " ] && [ "$ex" = "0:0 " ]
}
status_is() { [ "$(json_number "$1/summary.json" steps)" = "$3" ] && grep -q "\"status\": *\"$2\"" "$1/summary.json"; }
out_of() { echo "$T/out/$1_$2.out"; }

echo "train.sbatch ($train):"
o=$(out_of pipetrain "$train"); r=$T/runs/fashion_mlp_$train
expect "job completed" completed "$train"
expect "output file %x_%j: $(basename "$o")" test -s "$o"
if [ "$pmix" = 1 ]; then
  expect "launched with srun --mpi=pmix" grep -q "^launcher:  srun --mpi=pmix" "$o"
else
  expect "srun has no PMIx here: mpirun fallback" grep -q "^launcher:  mpirun" "$o"
fi
expect "environment logged (SLURM_NTASKS=2, threads 1)" grep -q "^SLURM_NTASKS=2" "$o"
expect "threads from the allocation" grep -q "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1" "$o"
expect "two ranks on distinct single cores" test "$(grep -o 'affinity: rank [01] .* cpus [0-9]* ' "$o" | awk '{print $NF}' | sort -u | wc -l)" = 2
expect "affinity logged with the run" test "$(grep -c '^affinity: rank' "$r/job_$train.txt" 2>/dev/null)" = 2
expect "run directory: summary.json completed, 30 steps" status_is "$r" completed 30
expect "2 ranks in summary.json" test "$(json_number "$r/summary.json" ranks)" = 2
grep -h "^RESULT" "$o" | sed 's/^/  /'

echo "train.sbatch with LAUNCHER=mpirun ($fallback):"
o=$(out_of pt-mpirun "$fallback"); r=$T/runs/fallback
expect "job completed" completed "$fallback"
expect "launched with mpirun" grep -q "^launcher:  mpirun" "$o"
expect "two ranks bound to distinct cores" test "$(grep -o 'affinity: rank [01] .* cpus [0-9]* ' "$o" | awk '{print $NF}' | sort -u | wc -l)" = 2
expect "run directory: summary.json completed, 30 steps" status_is "$r" completed 30

echo "strong_scaling.sbatch as an array ($sweep):"
expect "4 array tasks completed" completed "$sweep"
for p in r1_bsp r2_bsp r1_1f1b r2_1f1b; do
  expect "point $p: summary.json completed, 30 steps" status_is "$T/runs/sweep/$p" completed 30
done
expect "4 POINT lines with samples/s" test "$(grep -c '^POINT .*status=completed samples_per_s=[0-9]' "$T/runs/sweep/points.txt" 2>/dev/null)" = 4
task_outs=$(grep -l "^SLURM_ARRAY_JOB_ID=$sweep\$" "$T"/out/pt-scaling_*.out 2>/dev/null)
expect "4 task outputs, each with its POINT line" test "$(echo "$task_outs" | wc -w)/$(cat $task_outs /dev/null | grep -c '^POINT ')" = 4/4
sed 's/^/  /' "$T/runs/sweep/points.txt"
bash jobs/local/strong_scaling.sh --table "$T/runs/sweep" | sed 's/^/  /'

echo "strong_scaling.sbatch as job steps, POINTS=\"1 1f1b; 2 gpipe [3]\" ($steps):"
o=$(out_of pt-scaling "$steps")
expect "job completed" completed "$steps"
expect "point r1_1f1b: summary.json completed, 30 steps" status_is "$T/runs/steps/r1_1f1b" completed 30
expect "point r2_gpipe (split [3]): summary.json completed, 30 steps, 2 stages" \
  eval 'status_is "$T/runs/steps/r2_gpipe" completed 30 && test "$(json_number "$T/runs/steps/r2_gpipe/summary.json" stages)" = 2'
expect "two steps in one job, srun -n 1 then -n 2" eval 'grep -q "point 0: srun .* -n 1 " "$o" && grep -q "point 1: srun .* -n 2 " "$o" || ! grep -q "^launcher:  srun" "$o"'
expect "the job output ends with the table" grep -q "^gpipe  *2 .*completed" "$o"

echo "SIGUSR1, checkpoint and resubmission ($resub):"
o=$(out_of pt-resub "$resub"); r=$T/runs/resubmit
next=$(grep -o 'resubmitted as job [0-9]*' "$o" | awk '{print $4}')
expect "job completed (exit 0 after the checkpoint)" completed "$resub"
expect "the trap forwarded SIGUSR1 to the step" grep -q "caught SIGUSR1: forwarding SIGUSR1 to the step" "$o"
expect "pipetrain stopped after a checkpoint" grep -q "^stopped at step [0-9]* after a checkpoint (SIGUSR1)" "$o"
expect "the job resubmitted itself" test -n "$next"
if [ -n "$next" ]; then
  o2=$(out_of pt-resub "$next")
  expect "resubmitted job $next completed" completed "$next"
  expect "it was submitted with --dependency=afterany:$resub" grep -q "^sbatch: .*--dependency=afterany:$resub " "$o"
  expect "it resumed from the checkpoint" grep -q "^resuming from .*checkpoints" "$o2"
  expect "RESUBMIT_COUNT=1 of 1" grep -q "resubmission 1 of at most 1" "$o2"
fi
expect "checkpoints committed" test -n "$(ls "$r/checkpoints" 2>/dev/null)"
expect "run directory: summary.json completed, 400 steps" status_is "$r" completed 400
expect "two job logs in the run directory" test "$(ls "$r"/job_*.txt 2>/dev/null | wc -l)" = 2

echo "localhost Slurm test took $(( $(date +%s) - t_start )) s"
finish
