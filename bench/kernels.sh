#!/usr/bin/env bash
# Kernel benchmark (issue 15; bench/README.md, "oneDNN kernels"): this machine's own matmul
# limit and every training GEMM and convolution as a fraction of it, in the same run.
#   1. brings build/pt_bench_kernels (bench/kernels.cpp) up to date (PT_BENCH_KERNELS: a prebuilt one),
#   2. runs it with one thread (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1) and OpenBLAS's best
#      core for this CPU: the CPU model, OpenBLAS core, oneDNN version and ISA; the oneDNN
#      matmul peak at 1024^3 in fp32 and bf16; then per shape OpenBLAS fp32, oneDNN fp32 and
#      oneDNN bf16 GFLOP/s (median and range), fractions of the peak, the fp32 rule's pick and
#      the oneDNN implementation names,
#   3. checks the goal: the MLP's (batch 128) and the transformer's large GEMMs reach >= 50% of
#      the peak in both precisions (fp32: the kernel the rule picks).
# Output: runs/bench_kernels/kernels-DATE.log and .csv. Usage: bench/kernels.sh [pt_bench_kernels
# options: --reps N --ms M --only TEXT]; env REPS (default 9), MS (default 20), OUT, BENCH_CORETYPE.
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
out=${OUT:-runs/bench_kernels}
mkdir -p "$out"
bin=${PT_BENCH_KERNELS:-build/pt_bench_kernels}
if [ -z "${PT_BENCH_KERNELS:-}" ]; then make -j2 --no-print-directory "$bin" >/dev/null || { echo "FAIL: cannot build $bin"; exit 1; }; fi
# OpenBLAS at its best core for this CPU (not a slower one left in the environment), unless
# BENCH_CORETYPE names one
ct=${BENCH_CORETYPE:-$(best_coretype)}
[ -n "$ct" ] && export OPENBLAS_CORETYPE=$ct
stamp=$(date +%Y%m%d-%H%M%S)
log=$out/kernels-$stamp.log
csv=$out/kernels-$stamp.csv
{ date -u; uname -srm; echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"; } | tee "$log"
"$bin" --reps "${REPS:-9}" --ms "${MS:-20}" --csv "$csv" "$@" | tee -a "$log" || { echo "FAIL: $bin"; exit 1; }

# goal: large GEMMs of the MLP (batch 128: fc1, fc2) and the transformer (the four linears)
awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }  # columns by name
  { shape = $col["shape"]; gsub(/"/, "", shape); group = $col["group"]; variant = $col["variant"] }
  !((group == "mlp b128" && shape ~ /^fc[12] /) || (group == "transformer" && shape !~ /^attn/)) { next }
  { pick = ($col["fp32_rule"] == "oneDNN") ? "oneDNN fp32" : "OpenBLAS fp32" }
  variant == pick          { f32[shape] = $col["fraction_of_peak"]; n32++ }
  variant == "oneDNN bf16" { f16[shape] = $col["fraction_of_peak"] }
  END {
    bad = 0
    for (s in f32) {
      ok = f32[s] >= 0.5 && f16[s] >= 0.5
      if (!ok) bad++
      printf "  %-44s fp32 %.2f  bf16 %.2f  %s\n", s, f32[s], f16[s], ok ? "ok" : "BELOW 0.5"
    }
    printf "goal (>= 0.50 of the 1024^3 peak, both precisions): %d of %d large GEMMs %s\n", n32 - bad, n32,
           bad ? "FAIL" : "PASS"
    exit bad ? 1 : 0
  }' "$csv" | sort | tee -a "$log"
status=${PIPESTATUS[0]}
echo "log $log; CSV $csv"
exit "$status"
