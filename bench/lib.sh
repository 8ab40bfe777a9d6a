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

# cpu_bf16_case: the CPU model and which bf16 goals can be judged on it (every benchmark prints it)
cpu_bf16_case() {
  local model flags
  model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
  flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
  case "$flags" in
    *" amx_bf16 "*) echo "$model: AMX (amx_bf16): the AMX goals apply" ;;
    *" avx512_bf16 "*) echo "$model: AVX512-BF16 without AMX: the AMX goals cannot be judged here (their AVX512-BF16 forms apply)" ;;
    *) echo "$model: no bf16 instructions: bf16 speed goals cannot be judged here" ;;
  esac
}
