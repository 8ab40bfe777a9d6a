#!/usr/bin/env bash
# Kernel benchmark (issues 15 and 24; bench/README.md, "oneDNN kernels"): the machine's matmul
# limit, measured in the same run by code that is not pipetrain's, and every training GEMM and
# convolution as a fraction of it.
#   1. brings build/pt_bench_kernels (bench/kernels.cpp, machine_peak.cpp) up to date
#      (PT_BENCH_KERNELS: a prebuilt one),
#   2. when /usr/bin/python3 has torch: torch.matmul on one thread (bench/torch_matmul.py) at
#      1024^3 and 4096x4096x1024 in fp32 and bf16, before and after the C++ run,
#   3. runs pt_bench_kernels with one thread and OpenBLAS's best core for this CPU: the CPU
#      model and its bf16 case (AMX, AVX512-BF16 only, none), OpenBLAS core, oneDNN version and
#      ISA; the machine peak per precision = the best median of oneDNN's matmul called directly
#      (plain and blocked weights, both shapes, sampled before and after the rows) and of
#      torch.matmul, naming where it came from; then per shape OpenBLAS fp32, oneDNN fp32 and
#      oneDNN bf16 GFLOP/s through pipetrain's Backend (median and range), fractions of the
#      peak, the fp32 rule's pick and the oneDNN implementation names,
#   4. checks the goal (issue 24): the large GEMMs of the MLP (batch 128), tinygpt and
#      gpt2_small reach >= 70% of the bf16 peak, and their fp32 GEMMs (the kernel the rule
#      picks) >= 80% of the fp32 peak.
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
{ date -u; uname -srm; echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"; echo "CPU case: $(cpu_bf16_case)"; } | tee "$log"
ext=$out/external-$stamp.txt
: >"$ext"
torch_round() {  # one round of torch.matmul, appended to $ext (two rounds: before and after)
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_matmul.py --reps "${REPS:-9}" --ms "${MS:-20}" 1024x1024x1024 4096x4096x1024 |
      tee -a "$ext" | sed 's/^/  /' | tee -a "$log"
  else
    echo "  torch.matmul: python3-torch not installed (make deps-dev): the peak is oneDNN's alone" | tee -a "$log"
  fi
}
echo "torch.matmul, round 1 (GFLOP/s median min max):" | tee -a "$log"
torch_round
OMP_NUM_THREADS=1 "$bin" --reps "${REPS:-9}" --ms "${MS:-20}" --csv "$csv" "$@" | tee -a "$log" || { echo "FAIL: $bin"; exit 1; }
echo "torch.matmul, round 2:" | tee -a "$log"
torch_round

# The machine peak per precision: the best of oneDNN's (the C++ run's, in the CSV) and
# torch.matmul's (per shape, the mean of the two rounds' medians); then the goal against it:
# the large GEMMs of the MLP (batch 128: fc1, fc2), tinygpt and gpt2_small (their linears).
# Without bf16 instructions (cpu_bf16_case "none") the bf16 fractions are printed, not judged.
judge16=1
grep -q -E ' (amx_bf16|avx512_bf16) ' <<<" $(grep -m1 '^flags' /proc/cpuinfo) " || judge16=0
awk -F, -v ext="$ext" -v judge16="$judge16" '
  BEGIN {
    while ((getline line < ext) > 0) {
      split(line, f, " "); key = f[2] " " f[3]; sum[key] += f[4]; cnt[key]++
    }
    for (k in sum) { split(k, kk, " "); v = sum[k] / cnt[k]; if (v > tpk[kk[1]]) { tpk[kk[1]] = v; tsrc[kk[1]] = "torch.matmul " kk[2] } }
  }
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  { shape = $col["shape"]; gsub(/"/, "", shape); group = $col["group"]; variant = $col["variant"]
    prec = variant == "oneDNN bf16" ? "bf16" : "fp32"
    if (!(prec in pk)) { pk[prec] = $col["peak_gflops"]; src = $col["peak_source"]; gsub(/"/, "", src); psrc[prec] = src } }
  !((group == "mlp b128" && shape ~ /^fc[12] /) || ((group == "tinygpt" || group == "gpt2_small") && shape !~ /^attn/)) { next }
  { pick = ($col["fp32_rule"] == "oneDNN") ? "oneDNN fp32" : "OpenBLAS fp32" }
  variant == pick          { g32[group " " shape] = $col["median_gflops"]; n32++ }
  variant == "oneDNN bf16" { g16[group " " shape] = $col["median_gflops"] }
  END {
    for (p in tpk) if (tpk[p] > pk[p]) { pk[p] = tpk[p]; psrc[p] = tsrc[p] }
    printf "machine peak: fp32 %.1f GFLOP/s (%s), bf16 %.1f GFLOP/s (%s)\n", pk["fp32"], psrc["fp32"], pk["bf16"], psrc["bf16"]
    bad = 0
    for (s in g32) {
      f32 = g32[s] / pk["fp32"]; f16 = pk["bf16"] > 0 ? g16[s] / pk["bf16"] : 0
      ok = f32 >= 0.8 && (f16 >= 0.7 || !judge16)
      if (!ok) bad++
      printf "  %-52s fp32 %.2f  bf16 %.2f  %s\n", s, f32, f16, ok ? "ok" : judge16 ? "BELOW (fp32 0.80, bf16 0.70)" : "BELOW (fp32 0.80)"
    }
    printf "goal (fp32 >= 0.80%s): %d of %d large GEMMs meet it: %s\n",
           judge16 ? " and bf16 >= 0.70 of the machine peak" : " of the machine peak; bf16 not judged: no bf16 instructions",
           n32 - bad, n32, bad ? "FAIL" : "PASS"
    exit bad ? 1 : 0
  }' "$csv" | sort -r | tee -a "$log"
status=${PIPESTATUS[0]}
echo "log $log; CSV $csv"
exit "$status"
