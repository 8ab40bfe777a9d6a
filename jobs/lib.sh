# Shared by jobs/slurm/*.sbatch and jobs/local/*.sh (sourced once the repository is found;
# the caller has cd'ed into it). Launching (srun with PMIx, or mpirun), one rank per core with
# binding, BLAS/OpenMP threads from the allocation, the environment and per-rank affinity log,
# forwarding SIGUSR1/SIGTERM to the running step, and reading summary.json. See docs/JOBS.md.

PT_BIN=${PT_BIN:-build/pipetrain}
PT_STEP_PID=""          # the srun/mpirun of the step in flight
PT_STOP_REQUESTED=0     # a stop signal reached this script
PT_STOP_SIGNAL=""       # USR1 (time-limit warning or scancel -b -s USR1) or TERM/INT
PT_RESEND_PID=""

pt_log() { echo "[$(date +%H:%M:%S)] $*"; }

# pt_run_locally SBATCH_SCRIPT [args...]: run a jobs/slurm script on this machine with plain
# mpirun, ignoring a surrounding Slurm allocation (no srun, no resubmission), its output also in
# a log named like Slurm's %x_%j: <LOG_DIR>/<job name>_<PT_JOB_ID>.out. Does not return.
pt_run_locally() {
  local script=$1; shift
  unset SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_JOB_NAME
  export LAUNCHER=${LAUNCHER:-mpirun} PT_REPO=${PT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  export PT_JOB_ID=${PT_JOB_ID:-$(date +%Y%m%d%H%M%S)}
  local log
  log=${LOG_DIR:-.}/$(sed -n 's/^#SBATCH --job-name=//p' "$script")_$PT_JOB_ID.out
  mkdir -p "$(dirname "$log")"
  echo "log: $log"
  exec > >(trap '' INT TERM; exec tee -a "$log") 2>&1
  exec bash "$script" "$@"
}

# pt_json FILE KEY: the first value of "KEY" in a JSON file (numbers and plain strings)
pt_json() { grep -o "\"$2\": *[^,}]*" "$1" 2>/dev/null | head -1 | sed 's/^[^:]*: *//; s/"//g; s/ *$//'; }

# pt_deck_stem DECK: input/fashion_mlp.toml -> fashion_mlp
pt_deck_stem() { local b; b=$(basename "$1"); echo "${b%.toml}"; }

# pt_overrides OVERRIDES...: "k=v k=v" -> PT_SETS=(--set k=v ...); run.name / run.output_dir
# words also set RUN_NAME / OUTPUT_DIR, so the script always knows the run directory.
pt_overrides() {
  PT_SETS=()
  local w words
  read -ra words <<<"$*"  # split on blanks, no glob expansion ([3] stays [3])
  for w in "${words[@]}"; do
    case $w in
      run.name=*) RUN_NAME=${w#run.name=} ;;
      run.output_dir=*) OUTPUT_DIR=${w#run.output_dir=} ;;
      *=*) PT_SETS+=(--set "$w") ;;
      *) echo "OVERRIDES: '$w' is not key=value" >&2; return 2 ;;
    esac
  done
}

# pt_threads: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS = CPUs per rank (SLURM_CPUS_PER_TASK, else 1)
pt_threads() {
  PT_CPUS_PER_RANK=${CPUS_PER_RANK:-${SLURM_CPUS_PER_TASK:-1}}
  export OPENBLAS_NUM_THREADS=$PT_CPUS_PER_RANK OMP_NUM_THREADS=$PT_CPUS_PER_RANK
  export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
}

# pt_choose_launcher: LAUNCHER=auto|srun|mpirun. auto: srun when inside a Slurm allocation,
# srun offers a PMIx plugin (pmix, else pmix_v4/v3/v5) and a one-rank probe of pipetrain
# under it initialises MPI; otherwise mpirun. Sets PT_LAUNCHER and PT_MPI_PLUGIN.
pt_choose_launcher() {
  local want=${LAUNCHER:-auto} list p
  PT_LAUNCHER=mpirun PT_MPI_PLUGIN=""
  PT_LAUNCH_NOTE=""
  if [ "$want" = mpirun ]; then PT_LAUNCH_NOTE="LAUNCHER=mpirun"; return 0; fi
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    PT_LAUNCH_NOTE="not inside a Slurm allocation"
    [ "$want" = srun ] && { echo "LAUNCHER=srun but not inside a Slurm allocation" >&2; return 2; }
    return 0
  fi
  if ! command -v srun >/dev/null 2>&1; then
    PT_LAUNCH_NOTE="srun not found"
  else
    # plugin names: the indented lines, and the list after "specific pmix plugin versions available:"
    list=$(srun --mpi=list 2>&1 | sed -n 's/^[[:space:]]\+//p; s/.*versions available:[[:space:]]*//p' | tr ', ' '\n\n' | grep -v '^$')
    for p in ${MPI_PLUGIN:-pmix pmix_v4 pmix_v5 pmix_v3}; do
      if grep -qx "$p" <<<"$list"; then PT_MPI_PLUGIN=$p; break; fi
    done
    if [ -z "$PT_MPI_PLUGIN" ]; then
      PT_LAUNCH_NOTE="srun offers no PMIx plugin ($(echo $list | tr '\n' ' '))"
    elif [ "${SRUN_PROBE:-1}" = 0 ]; then
      PT_LAUNCHER=srun
    elif timeout 120 srun --mpi="$PT_MPI_PLUGIN" -n 1 -N 1 --cpus-per-task="$PT_CPUS_PER_RANK" "$PT_BIN" --help >/dev/null 2>"${TMPDIR:-/tmp}/pt_probe.$$"; then
      PT_LAUNCHER=srun
    else
      PT_LAUNCH_NOTE="probe 'srun --mpi=$PT_MPI_PLUGIN -n 1 $PT_BIN --help' failed: $(tail -3 "${TMPDIR:-/tmp}/pt_probe.$$" | tr '\n' ' ')"
    fi
    rm -f "${TMPDIR:-/tmp}/pt_probe.$$"
  fi
  if [ "$PT_LAUNCHER" != srun ] && [ "$want" = srun ]; then echo "LAUNCHER=srun unusable: $PT_LAUNCH_NOTE" >&2; return 2; fi
  return 0
}

# pt_launch_cmd NP: PT_LAUNCH=(srun|mpirun ...) and PT_CMD=(PT_LAUNCH + affinity wrapper) for NP ranks, one per core (CPUS_PER_RANK cores each), bound
pt_launch_cmd() {
  local np=$1 cpr=$PT_CPUS_PER_RANK
  if [ "$PT_LAUNCHER" = srun ]; then
    PT_LAUNCH=(srun --mpi="$PT_MPI_PLUGIN" -n "$np" --cpus-per-task="$cpr" --cpu-bind=cores --kill-on-bad-exit=1 ${SRUN_FLAGS:-})
  else
    PT_LAUNCH=(${MPIRUN:-mpirun})
    [ "$(id -u)" = 0 ] && PT_LAUNCH+=(--allow-run-as-root)
    local cores
    cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
    if [ -z "${SLURM_JOB_ID:-}" ] && [ $((np * cpr)) -gt "$cores" ]; then
      # more ranks than cores on this machine: binding to cores is impossible
      PT_LAUNCH+=(-np "$np" --oversubscribe --bind-to none)
      pt_log "note: $np ranks x $cpr cores > $cores cores here: oversubscribed, no binding"
    elif [ "$cpr" -gt 1 ]; then
      PT_LAUNCH+=(-np "$np" --map-by "slot:PE=$cpr" --bind-to core)
    else
      PT_LAUNCH+=(-np "$np" --map-by core --bind-to core)
    fi
    PT_LAUNCH+=(-x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x OMP_PROC_BIND -x OMP_PLACES ${MPIRUN_FLAGS:-})
  fi
  # Each rank logs its host and CPU set (to the job output and AFFINITY_LOG), then becomes
  # pipetrain. USR1 is ignored until pipetrain installs its handler, so an early signal is
  # not fatal (the script re-sends it).
  PT_CMD=("${PT_LAUNCH[@]}" bash -c 'r=${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}
l="affinity: rank $r host $(hostname -s) pid $$ cpus $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) blas_threads ${OPENBLAS_NUM_THREADS:-?}"
echo "$l"; [ -n "${AFFINITY_LOG:-}" ] && echo "$l" >>"$AFFINITY_LOG"
trap "" USR1; exec "$@"' pt-rank)
}

# Signals: the batch shell gets USR1 from `#SBATCH --signal=B:USR1@120` (or
# `scancel --batch --signal=USR1`), TERM from scancel / the time limit, INT from Ctrl-C.
# A running step gets SIGUSR1 (srun and mpirun pass it to every rank; pipetrain then agrees
# on an update boundary, commits a checkpoint and exits 0). It is re-sent every 20 s until
# the step ends, in case a rank had not installed its handler yet. A second Ctrl-C
# terminates the step without waiting for the checkpoint.
pt_on_signal() {
  local again=$PT_STOP_REQUESTED
  PT_STOP_REQUESTED=1
  [ -z "$PT_STOP_SIGNAL" ] && PT_STOP_SIGNAL=$1
  if [ -z "$PT_STEP_PID" ] || ! kill -0 "$PT_STEP_PID" 2>/dev/null; then
    pt_log "caught SIG$1 with no step running: no further step will start"
  elif [ "$1" = INT ] && [ "$again" = 1 ]; then
    pt_log "caught SIGINT again: terminating the step (pid $PT_STEP_PID)"
    kill -TERM "$PT_STEP_PID" 2>/dev/null
  else
    pt_log "caught SIG$1: forwarding SIGUSR1 to the step (pid $PT_STEP_PID) so pipetrain checkpoints and stops"
    kill -USR1 "$PT_STEP_PID" 2>/dev/null
    if [ -z "$PT_RESEND_PID" ]; then
      (trap 'kill $z 2>/dev/null; exit 0' TERM; trap '' USR1 INT
       while :; do sleep 20 & z=$!; wait $z; kill -0 "$PT_STEP_PID" 2>/dev/null || break; kill -USR1 "$PT_STEP_PID"; done) &
      PT_RESEND_PID=$!
    fi
  fi
}
pt_traps() {
  trap 'pt_on_signal USR1' USR1
  trap 'pt_on_signal TERM' TERM
  trap 'pt_on_signal INT' INT
}

# pt_run_step CMD...: run the step in the background and wait for it (a trapped signal
# interrupts `wait`; wait again until the step really ended). Returns its exit status.
# Outside Slurm the step gets its own session (setsid), so a terminal's Ctrl-C reaches only
# this script, which turns it into SIGUSR1 (a checkpoint) instead of killing mpirun.
pt_run_step() {
  local rc
  if [ -z "${SLURM_JOB_ID:-}" ] && command -v setsid >/dev/null; then
    setsid "$@" &
  else
    "$@" &
  fi
  PT_STEP_PID=$!
  while :; do
    wait "$PT_STEP_PID"; rc=$?
    kill -0 "$PT_STEP_PID" 2>/dev/null || break  # still there (or a zombie): the wait was interrupted
  done
  if [ -n "$PT_RESEND_PID" ]; then kill "$PT_RESEND_PID" 2>/dev/null; wait "$PT_RESEND_PID" 2>/dev/null; PT_RESEND_PID=""; fi
  PT_STEP_PID=""
  return $rc
}

# pt_log_env TITLE: the environment a run ran in (job output; tee'd into the run directory by callers)
pt_log_env() {
  echo "=== $1"
  echo "date:      $(date -Is)"
  echo "host:      $(hostname -s) ($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $(uname -r))"
  echo "user:      $(id -un)"
  echo "repo:      $PWD ($(git rev-parse --short HEAD 2>/dev/null || echo no git)$(git diff --quiet HEAD 2>/dev/null || echo ', modified'))"
  echo "binary:    $PT_BIN"
  echo "launcher:  $PT_LAUNCHER${PT_MPI_PLUGIN:+ --mpi=$PT_MPI_PLUGIN}${PT_LAUNCH_NOTE:+ (mpirun because: $PT_LAUNCH_NOTE)}"
  echo "threads:   OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}"
  echo "mpi:       $(mpirun --version 2>/dev/null | head -1)"
  local v
  for v in SLURM_CLUSTER_NAME SLURM_JOB_ID SLURM_JOB_NAME SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_JOB_PARTITION \
           SLURM_JOB_NODELIST SLURM_JOB_NUM_NODES SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK \
           SLURM_CPUS_ON_NODE SLURM_JOB_CPUS_PER_NODE SLURM_SUBMIT_DIR SLURM_RESTART_COUNT SLURM_MPI_TYPE; do
    [ -n "${!v:-}" ] && echo "$v=${!v}"
  done
  if [ -n "${SLURM_JOB_ID:-}" ] && command -v scontrol >/dev/null; then
    scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -oE '(TimeLimit|StdOut|Command)=[^ ]*' | sed 's/^/slurm:     /'
  fi
  env | grep -E '^(OMPI_MCA|PMIX_MCA|OMP_|OPENBLAS)' | sort | sed 's/^/env:       /'
  echo "script cpus: $(taskset -cp $$ 2>/dev/null | sed 's/.*: //' || sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status)"
}

# pt_point_line RUN_DIR LABEL...: one summary line from RUN_DIR/summary.json
pt_point_line() {
  local s=$1/summary.json; shift
  if [ ! -f "$s" ]; then echo "$* status=missing samples_per_s=- run=${s%/summary.json}"; return; fi
  printf '%s status=%s samples_per_s=%s train_wall_s=%s bubble_fraction=%s steps=%s final_test_accuracy=%s run=%s\n' \
    "$*" "$(pt_json "$s" status)" "$(pt_json "$s" samples_per_s)" "$(pt_json "$s" train_wall_s)" \
    "$(pt_json "$s" bubble_fraction)" "$(pt_json "$s" steps)" "$(pt_json "$s" final_test_accuracy)" "${s%/summary.json}"
}

# pt_scaling_table POINTS_FILE: samples/s per point, speedup and efficiency against the
# smallest rank count of the same schedule (the last line of each point counts)
pt_scaling_table() {
  [ -f "$1" ] || { echo "no points in $1"; return 1; }
  awk '
    /^POINT / {
      delete f
      for (i = 2; i <= NF; i++) { k = $i; sub(/=.*/, "", k); v = $i; sub(/^[^=]*=/, "", v); f[k] = v }
      key = f["schedule"] SUBSEP f["ranks"]
      if (!(key in seen)) { order[++n] = key; seen[key] = 1 }
      sps[key] = f["samples_per_s"]; st[key] = f["status"]; run[key] = f["run"]; sch[key] = f["schedule"]; rk[key] = f["ranks"] + 0
      if (f["status"] == "completed" && (!(f["schedule"] in base) || f["ranks"] + 0 < baser[f["schedule"]])) {
        base[f["schedule"]] = f["samples_per_s"]; baser[f["schedule"]] = f["ranks"] + 0
      }
    }
    END {
      printf "%-16s %5s %12s %8s %10s  %-10s %s\n", "schedule", "ranks", "samples/s", "speedup", "efficiency", "status", "run"
      for (i = 1; i <= n; i++) {
        k = order[i]; s = sch[k]
        sp = "-"; ef = "-"
        if (st[k] == "completed" && (s in base) && base[s] > 0) {
          sp = sprintf("%.2f", sps[k] / base[s]); ef = sprintf("%.2f", sps[k] / base[s] / (rk[k] / baser[s]))
        }
        printf "%-16s %5d %12s %8s %10s  %-10s %s\n", s, rk[k], sps[k] ~ /^[0-9.eE+-]+$/ ? sprintf("%.1f", sps[k]) : "-", sp, ef, st[k], run[k]
      }
      printf "speedup and efficiency: against the smallest completed rank count of the same schedule\n"
    }' "$1"
}
