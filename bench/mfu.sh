#!/usr/bin/env bash
# gpt2_small's model FLOPs utilisation in bf16 on one pinned core (issue 24), against the
# machine's bf16 matmul peak measured in the same run by code that is not pipetrain's:
#  - the peak: build/pt_bench_kernels with no benchmark rows (raw oneDNN matmuls, plain and
#    with blocked weights, at 1024^3 and 4096x4096x1024, and torch.matmul when python3-torch is
#    present: bench/kernels.sh's "machine peak"), measured before and after every round;
#  - a round: `pipetrain train input/gpt2_small.toml` for STEPS steps (bf16, batch 16 in 4
#    microbatches of 4 x 256 tokens), with cluster.peak_gflops set to the peak measured just
#    before it, so its PERF line prints mfu= too; its model GFLOP/s (summary.json: 6 N per token
#    plus the attention scores, 12 T D per layer, as PaLM counts them) over the mean of the two
#    peaks around it is the round's MFU (the whole run: the first step's primitive creation
#    included, as the PERF line's mfu=; the activation pools are allocated and first touched at
#    setup since 2026-12-06, before train_wall_s starts); its steady MFU takes the
#    median seconds per step over steps 2 to STEPS instead (every step logged;
#    tools/studies.py's steady_seconds_per_step).
# Prints the CPU model and its bf16 case, each round, the median and range over rounds, and the
# goal line (AMX: MFU >= 0.50; a CPU without AMX cannot judge it). PT_KEPT_LAYOUTS passes through.
# Usage: bench/mfu.sh [ROUNDS=3] [STEPS=6]   (about 2 minutes per round on one core)
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=${1:-3}; steps=${2:-6}
out=${OUT:-runs/bench_mfu}
mkdir -p "$out"
[ -x build/pt_bench_kernels ] || make -s build/pt_bench_kernels >/dev/null
ncores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
core=$(( ncores - 1 ))
echo "CPU: $(cpu_bf16_case); $ncores cores, pinned to core $core; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PT_KEPT_LAYOUTS=${PT_KEPT_LAYOUTS:-0}"

# the machine's bf16 peak in GFLOP/s, and where it came from
peak() {
  taskset -c "$core" build/pt_bench_kernels --only '(no rows)' 2>/dev/null | grep '^machine peak:' |
    sed 's/.*bf16 \([0-9.]*\) GFLOP\/s (\(.*\))$/\1 \2/'
}

mfus=(); steady=()
for r in $(seq 1 "$rounds"); do
  read -r p0 src0 <<<"$(peak)"
  [ -n "${p0:-}" ] || { echo "FAIL: no machine peak from build/pt_bench_kernels"; exit 1; }
  dir="$out/round$r"
  rm -rf "$dir"
  taskset -c "$core" $MPIRUN $MPIRUN_FLAGS --bind-to none -x PT_KEPT_LAYOUTS -np 1 "$PT_BIN" train input/gpt2_small.toml \
    --set train.precision=\"bf16\" --set train.max_steps="$steps" --set cluster.peak_gflops="$p0" \
    --set train.log_every=1 --set run.output_dir=\""$dir"\" >"$dir.log" 2>&1 || { echo "FAIL: round $r (see $dir.log)"; exit 1; }
  read -r p1 src1 <<<"$(peak)"
  sum="$dir/gpt2_small/summary.json"
  g=$(json_get "$sum" model_gflops_per_s); tps=$(json_get "$sum" tokens_per_s)
  m=$(awk -v g="$g" -v a="$p0" -v b="$p1" 'BEGIN { printf "%.4f", g / ((a + b) / 2) }')
  mfus+=("$m")
  # steady: the run's model FLOPs per step over its median seconds per step after the first
  wall=$(json_get "$sum" train_wall_s)
  step_s=$(python3 -c "import sys; sys.path.insert(0, 'tools'); from studies import steady_seconds_per_step
print(steady_seconds_per_step(sys.argv[1], float(sys.argv[2])))" "$dir/gpt2_small" "$(json_get "$sum" batch_size)" 2>/dev/null)
  ms=n/a
  if [[ "$step_s" =~ ^[0-9.]+$ ]] && awk -v d="$step_s" 'BEGIN { exit !(d > 0) }'; then
    ms=$(awk -v g="$g" -v w="$wall" -v n="$steps" -v d="$step_s" -v a="$p0" -v b="$p1" 'BEGIN { printf "%.4f", g * w / n / d / ((a + b) / 2) }')
    steady+=("$ms")
  else
    step_s=0  # a single logged step: no steady figure
  fi
  echo "round $r: peak $p0 / $p1 GFLOP/s ($src0), $(printf '%.1f' "$tps") tokens/s, model $(printf '%.1f' "$g") GFLOP/s, MFU $m;" \
       "PERF: $(grep -o 'mfu=[^ ]*' "$dir.log"); steady: $(printf '%.3f' "$step_s") s per step, MFU $ms;" \
       "$(grep -o 'memory per rank.*' "$dir.log")"
done
read -r med lo hi <<<"$(printf '%s\n' "${mfus[@]}" | stats)"
smed=n/a; slo=; shi=
[ ${#steady[@]} -gt 0 ] && read -r smed slo shi <<<"$(printf '%s\n' "${steady[@]}" | stats)"
echo "gpt2_small bf16 MFU: median $med (range $lo-$hi over $rounds rounds); steady (steps 2-$steps): median $smed (range $slo-$shi over ${#steady[@]} rounds)"
if grep -q ' amx_bf16 ' <<<" $(grep -m1 '^flags' /proc/cpuinfo) "; then
  awk -v m="$med" 'BEGIN { exit !(m >= 0.5) }' && echo "goal MFU >= 0.50 (AMX, whole run): PASS" || echo "goal MFU >= 0.50 (AMX, whole run): FAIL"
else
  echo "goal MFU >= 0.50 is set for an AMX CPU: not judged here"
fi
