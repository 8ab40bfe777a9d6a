#!/usr/bin/env bash
# The test driver behind `make test`: GoogleTest unit tests at np 1, the MPI-aware tests
# (suites named Mpi*) at np 2 and 4, then the integration scripts in tests/mpi/. Every
# multi-rank run is under a timeout. Usage: run_tests.sh [unit|mpi|all|more]
# all (make test) runs each integration suite's core (PT_TESTS=core); more (make test-more) runs
# the parts the core leaves out, in the suites that have them (tests/mpi/lib.sh).
set -u
cd "$(dirname "$0")/.."
what=${1:-all}
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
root_flag=""; [ "$(id -u)" = 0 ] && root_flag="--allow-run-as-root"
export MPIRUN_FLAGS="$root_flag --oversubscribe"
export OMPI_MCA_rmaps_base_oversubscribe=1
export PT_BIN=$BUILD/pipetrain
failed=()
passed=0
t_all=$(date +%s)

run() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name"
  if timeout --kill-after=10 "$limit" "$@"; then
    passed=$((passed + 1)); echo "--- PASS $name ($(( $(date +%s) - t0 ))s)"
  else
    local rc=$?
    [ $rc = 124 ] && echo "--- TIMEOUT $name after ${limit}s" || echo "--- FAIL $name (exit $rc)"
    failed+=("$name")
  fi
}

if [ "$what" = unit ] || [ "$what" = all ]; then
  run "unit tests (np 1)" 900 $MPIRUN $MPIRUN_FLAGS -np 1 $BUILD/pt_tests --gtest_brief=1
  # the composed attention (what the CUDA backend runs) on the host: against the autocast
  # fixtures and PyTorch, and every recompute/split equality, in fp32 and bf16
  run "layer tests with the composed attention (PT_FUSED_ATTENTION=0)" 300 env PT_FUSED_ATTENTION=0 \
    $MPIRUN $MPIRUN_FLAGS -x PT_FUSED_ATTENTION -np 1 $BUILD/pt_tests --gtest_brief=1 \
    --gtest_filter='Bf16VsAutocast*:SplitBackward*:Recompute*:GradCheck*:LayerVsTorch*:ModelVsTorch*:TiedHead*:SequenceLayers*:Executor*'
  # the memory model and the simulator with the opt-in weight layouts counted (PT_KEPT_LAYOUTS=1)
  run "memory tests with kept weight layouts (PT_KEPT_LAYOUTS=1)" 300 env PT_KEPT_LAYOUTS=1 \
    $MPIRUN $MPIRUN_FLAGS -x PT_KEPT_LAYOUTS -np 1 $BUILD/pt_tests --gtest_brief=1 \
    --gtest_filter='Simulator*:MemoryModel*:*Footprint*:ParamViews*'
fi
if [ "$what" = unit ] || [ "$what" = all ]; then
  run "functions in src/ stay under 80 lines" 60 python3 tools/long_functions.py src
  run "docs/DECK.md matches the deck schema" 60 bash -c "$BUILD/pipetrain keys --markdown | diff -u docs/DECK.md - >/dev/null || { echo 'docs/DECK.md is stale: run make docs'; exit 1; }"
fi
if [ "$what" = mpi ] || [ "$what" = all ]; then
  for np in 2 3 4; do
    run "MPI unit tests (np $np)" 300 $MPIRUN $MPIRUN_FLAGS -np $np $BUILD/pt_tests --gtest_filter='Mpi*' --gtest_brief=1
  done
  for t in tests/mpi/*.sh; do
    [ -e "$t" ] && [ "$t" != tests/mpi/lib.sh ] || continue
    run "$(basename "$t" .sh)" 900 env PT_TESTS=core bash "$t"
  done
fi
if [ "$what" = more ]; then
  for t in $(grep -lE 'in_(more|\$part)\b' tests/mpi/*.sh | grep -v tests/mpi/lib.sh); do  # the suites with a more part
    run "$(basename "$t" .sh) (more)" 900 env PT_TESTS=more bash "$t"
  done
fi

echo
echo "tests: $passed passed, ${#failed[@]} failed, $(( $(date +%s) - t_all ))s"
for f in "${failed[@]}"; do echo "  FAILED: $f"; done
[ ${#failed[@]} = 0 ]
