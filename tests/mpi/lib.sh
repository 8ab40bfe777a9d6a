# Shared helpers for the integration tests (sourced). Every mpirun runs under a timeout.
PT_BIN=${PT_BIN:-build/pipetrain}
MPIRUN_FLAGS=${MPIRUN_FLAGS:---allow-run-as-root --oversubscribe}
export OMPI_MCA_rmaps_base_oversubscribe=1
failures=0
# Parts of a suite: `make test` runs each suite's core (PT_TESTS=core), `make test-more` the
# rest (PT_TESTS=more: what the core leaves out, only in suites that have such a part), a
# suite run by hand both (PT_TESTS=all, the default). A section runs under `if in_core` or
# `if in_more`; what both parts use runs unguarded.
PT_TESTS=${PT_TESTS:-all}
in_core() { [ "$PT_TESTS" != more ]; }
in_more() { [ "$PT_TESTS" != core ]; }

# train OUT NAME NP DECK [args...]: run build/pipetrain train into OUT/NAME, log in OUT/NAME.log;
# prints its PERF lines with the run's wall seconds (where a suite's time goes)
train() {
  local out=$1 name=$2 np=$3; shift 3
  local deck=$1; shift
  local t0=$SECONDS
  if ! timeout --kill-after=5 300 mpirun $MPIRUN_FLAGS -np "$np" "$PT_BIN" train "$deck" --set run.name="$name" --set run.plots=false "$@" \
      >"$out/$name.log" 2>&1; then
    echo "FAIL: training $name (np $np) failed:"; tail -20 "$out/$name.log"; failures=$((failures + 1)); return 1
  fi
  grep -h "^PERF" "$out/$name.log" | sed "s/^/  $name ($((SECONDS - t0)) s, np $np): /"
}

# compare A B RTOL: weights of two runs within RTOL (0 = bitwise)
compare() {
  if "$PT_BIN" compare "$1" "$2" --rtol "$3" --quiet >"$2.compare" 2>&1; then
    echo "  ok   $(tail -1 "$2.compare")"
  else
    echo "FAIL $(tail -1 "$2.compare")"; failures=$((failures + 1))
  fi
}

# same_losses A B: the logged losses of two runs are identical text
same_losses() {
  if diff <(grep -o '"loss":[^,]*' "$1/metrics.jsonl") <(grep -o '"loss":[^,]*' "$2/metrics.jsonl") >/dev/null; then
    echo "  ok   losses identical: $1 vs $2"
  else
    echo "FAIL losses differ: $1 vs $2"; failures=$((failures + 1))
  fi
}

# expect NAME CONDITION-COMMAND...: record a pass/fail with a message
expect() {
  local what=$1; shift
  if "$@"; then echo "  ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

finish() {
  if [ "$failures" = 0 ]; then echo "all checks passed"; exit 0; fi
  echo "$failures check(s) failed"; exit 1
}

# json_number FILE KEY: the first numeric value of "KEY" in a JSON file
json_number() { grep -o "\"$2\": *[-0-9][-0-9.eE+]*" "$1" | head -1 | sed 's/.*: *//'; }

# same_accuracy A B TOL: final test accuracies of two runs within TOL
same_accuracy() {
  local a b
  a=$(json_number "$1/summary.json" final_test_accuracy); b=$(json_number "$2/summary.json" final_test_accuracy)
  if awk -v a="$a" -v b="$b" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; then
    echo "  ok   test accuracy $b vs $a"
  else
    echo "FAIL test accuracy $b vs $a (tolerance $3)"; failures=$((failures + 1))
  fi
}
