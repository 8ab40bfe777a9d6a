#!/usr/bin/env bash
# Flakiness check behind `make test-repeat N=10`: run tests/run_tests.sh N times in a row; the
# second half (the last N/2 runs) runs while a `yes > /dev/null` process keeps one core busy,
# as on a shared machine. Prints each run's result as it ends, then every test's pass count
# (unloaded, loaded, total) and slowest time. The busy process is killed when the runs end,
# on Ctrl-C and on any exit. Logs: $REPEAT_LOGS (default build/test-repeat/run_NN.log).
# Usage: tests/repeat_tests.sh [N] [run_tests.sh argument: all|unit|mpi|more]
set -u
cd "$(dirname "$0")/.."
N=${1:-10}
what=${2:-all}
case "$N" in ''|*[!0-9]*|0) echo "usage: tests/repeat_tests.sh N [all|unit|mpi|more] (N >= 1)" >&2; exit 2 ;; esac
logs=${REPEAT_LOGS:-${BUILD:-build}/test-repeat}
mkdir -p "$logs"
rm -f "$logs"/run_*.log
loaded_from=$(( N - N / 2 + 1 ))  # runs loaded_from..N are loaded
burner="" child=""
stop_burner() {
  if [ -n "$burner" ]; then kill "$burner" 2>/dev/null; wait "$burner" 2>/dev/null; burner=""; fi
}
stop_all() {  # the test run in progress (its process group: mpirun and the ranks) and the busy core
  if [ -n "$child" ]; then kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; child=""; fi
  stop_burner
}
trap stop_burner EXIT
trap 'stop_all; echo "interrupted"; exit 130' INT TERM

echo "test-repeat: $N runs of tests/run_tests.sh $what; runs $loaded_from..$N with one core kept busy (yes > /dev/null); logs in $logs"
t_all=$(date +%s)
for i in $(seq 1 "$N"); do
  log=$(printf '%s/run_%02d.log' "$logs" "$i")
  load=idle
  if [ "$i" -ge "$loaded_from" ]; then
    load=loaded
    if [ -z "$burner" ]; then yes >/dev/null & burner=$!; fi
  fi
  t0=$(date +%s)
  # in the background, in its own process group, so that a signal reaches the trap at once
  set -m
  bash tests/run_tests.sh "$what" >"$log" 2>&1 &
  child=$!
  set +m
  wait "$child"
  rc=$?
  child=""
  printf '%s\n' "$load" >"$log.load"
  echo "run $i/$N ($load): $(grep -c '^--- PASS ' "$log") passed, $(grep -cE '^--- (FAIL|TIMEOUT) ' "$log") failed, $(( $(date +%s) - t0 ))s$( [ $rc = 0 ] || echo "  FAILED: $(grep -E '^--- (FAIL|TIMEOUT) ' "$log" | sed -E 's/^--- (FAIL|TIMEOUT) //' | tr '\n' ';')")"
done
stop_burner

echo
echo "test-repeat summary: $N runs ($(( N - loaded_from + 1 )) with one core busy), $(( $(date +%s) - t_all ))s"
awk -v N="$N" '
  FNR == 1 { run++; loaded = 0; lf = FILENAME ".load"; if ((getline l < lf) > 0 && l == "loaded") loaded = 1; close(lf) }
  /^--- (PASS|FAIL|TIMEOUT) / {
    status = $2; line = $0; sub(/^--- [A-Z]+ /, "", line); secs = -1
    if (status == "PASS") { if (match(line, / \([0-9]+s\)$/)) { secs = substr(line, RSTART + 2, RLENGTH - 4) + 0; line = substr(line, 1, RSTART - 1) } }
    else if (status == "FAIL") sub(/ \(exit [0-9]+\)$/, "", line)
    else sub(/ after [0-9]+s$/, "", line)
    if (!(line in seen)) { seen[line] = 1; order[++n] = line }
    runs[line]++
    if (status == "PASS") { pass[line]++; if (loaded) lpass[line]++; else ipass[line]++; if (!(line in slow) || secs > slow[line]) slow[line] = secs }
    if (loaded) lruns[line]++; else iruns[line]++
  }
  END {
    printf "%-42s %9s %9s %9s %8s\n", "test", "idle", "loaded", "total", "slowest"
    bad = 0
    for (k = 1; k <= n; k++) {
      t = order[k]
      printf "%-42s %4d/%-4d %4d/%-4d %4d/%-4d %7s\n", t, ipass[t], iruns[t], lpass[t], lruns[t], pass[t], runs[t], (t in slow) ? slow[t] "s" : "-"
      if (pass[t] != N) bad++
    }
    if (bad) printf "%d test(s) did not pass all %d runs\n", bad, N; else printf "every test passed all %d runs\n", N
    exit bad > 0
  }' $(ls "$logs"/run_*.log | sort)
