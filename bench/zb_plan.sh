#!/usr/bin/env bash
# The planner at the zero-bubble paper's 6.2B size (issue 25): synthetic profiles of its GPT
# (L 30, h 4096, 32 heads, sequence 1024, microbatch 1; tools/synthetic_gpt_profile.py: an
# A100's bf16 GEMMs at 150 TFLOP/s, 80 GB) at t = 1, 2, 4, 8, planned on 8 ranks joined by
# NVLink-class links (3e11 B/s, 5 us) for m = 24, 32 and 64 microbatches: pipetrain plan
# chooses (t, p, d, schedule, recompute) and prints the chosen plan's predicted bubble beside
# 1f1b's. The equal-cost 1F1B bubble (p - 1)/(m + p - 1) at p = 8 is 0.2258 / 0.1795 / 0.0986;
# the paper's Table 5 gives 0.2431 / 0.1985 / 0.1240 from profiled costs, which this profile's
# embedding and head (on the first and last stages) reproduce. Seconds on one core.
#   bash bench/zb_plan.sh [SCHEDULES=1f1b,zb-h1,zb-h2]
# Environment: PT_BIN (build/pipetrain), OUT (runs/bench_zb_plan).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PT_BIN:-build/pipetrain}
out=${OUT:-runs/bench_zb_plan}
schedules=${1:-1f1b,zb-h1,zb-h2}
mkdir -p "$out"
profiles=()
for t in 1 2 4 8; do
  python3 tools/synthetic_gpt_profile.py --tensor "$t" --out "$out/profile_t$t.json" >/dev/null
  profiles+=(--profile "$out/profile_t$t.json")
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') (planning only: the costs are the profile's)"
printf "%-4s %-44s %-30s %-9s %-9s %-9s\n" m "chosen (t, p, d, schedule, recompute)" "ms/sample at t = 1/2/4/8" bubble 1f1b equal
for m in 24 32 64; do
  "$bin" plan "${profiles[@]}" --ranks 8 --bandwidth 3e11 --latency 5e-6 --memory 8e10 --batch "$m" \
    --microbatches "$m" --schedules "$schedules" --out "$out/plan_m$m.json" >"$out/plan_m$m.txt" 2>&1
  python3 - "$out/plan_m$m.txt" "$m" <<'PY'
import re, sys
text, m = open(sys.argv[1]).read(), int(sys.argv[2])
g = re.search(r"^grid: t = (\d+), p = (\d+), d = (\d+).*; schedule (\S+), recompute (\S+); predicted bubble ([\d.]+)", text, re.M)
f = re.search(r"^1f1b with \d+ microbatches .*predicted bubble ([\d.]+)", text, re.M)
tried = re.search(r"parallel.tensor = \d+ \((.*)\)", text)
if not g:
    sys.exit(f"no plan: see {sys.argv[1]}")
t, p, d, sched, rec, bub = g.groups()
equal = (int(p) - 1) / (m + int(p) - 1)
short = "/".join(re.findall(r"t = \d+: ([\d.]+) ms", tried.group(1))) if tried else "-"
print(f"{m:<4} {'t ' + t + ', p ' + p + ', d ' + d + ', ' + sched + ', ' + rec:<44} {short[:30]:<30} "
      f"{float(bub):<9.4f} {float(f.group(1)) if f else float('nan'):<9.4f} {equal:<9.4f}")
PY
done
echo "bubble: the chosen plan's; 1f1b: the fastest 1f1b candidate's at the chosen t; equal: (p-1)/(m+p-1)"
