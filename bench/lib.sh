# Shared helpers for the benchmarks (sourced).
PT_BIN=${PT_BIN:-build/pipetrain}
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_FLAGS=${MPIRUN_FLAGS:-$([ "$(id -u)" = 0 ] && echo --allow-run-as-root) --oversubscribe}
export OMPI_MCA_rmaps_base_oversubscribe=1
# One BLAS thread per rank and the fast kernel for this CPU unless the caller chose otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# json_get FILE KEY [N]: the N-th (default 1st) number or string value of "KEY"
json_get() { grep -o "\"$2\": *[^,}]*" "$1" | sed -n "${3:-1}p" | sed 's/^[^:]*: *//; s/"//g'; }

# median and range of numbers on stdin: "median min max"
stats() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.6g %.6g %.6g\n", m, v[1], v[NR] }'; }

# best_coretype: SkylakeX on AVX-512 CPUs, Haswell on AVX2, else empty
best_coretype() {
  if grep -q avx512f /proc/cpuinfo && grep -q avx512bw /proc/cpuinfo; then echo SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then echo Haswell; fi
}
