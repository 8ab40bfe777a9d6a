#!/usr/bin/env bash
# VGG-16 plans from the published PipeDream profile: 4, 8 and 16 ranks on one level of
# 1.25 GB/s and 3.1 GB/s. Prints each chosen plan (replication like "15-1"), its predicted
# speedup over bsp and its communication reduction vs bsp, beside the paper's figures.
# The comparison is PipeDream's: every rank runs the profiled minibatch of 128 (the plan's
# units are 128 samples; the bsp baseline runs 128 per rank, --bsp-batch 128 x ranks).
# Usage: bench/paper_plans.sh   (PT_BIN overrides build/pipetrain; PT_PIPEDREAM_PROFILES the profiles)
set -u
cd "$(dirname "$0")/.."
BIN=${PT_BIN:-build/pipetrain}
PROFILES=${PT_PIPEDREAM_PROFILES:-../shared/data/pipedream-profiles}
VGG=$PROFILES/vgg16.graph.txt
[ -x "$BIN" ] || { echo "paper_plans: $BIN not built (make)"; exit 1; }
if [ ! -f "$VGG" ]; then
  echo "paper_plans: SKIPPED: $VGG not found (the published PipeDream profiles; set PT_PIPEDREAM_PROFILES)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "VGG-16 (published PipeDream profile, batch 128 per rank), one network level"
printf "%-6s %-10s %-10s %-4s %-12s %11s %13s %11s %11s %14s %10s\n" ranks bandwidth schedule M replication \
  "ms/sample" "bsp ms/samp" "speedup" "comm red." "straight spdup" "planner s"
for n in 4 8 16; do
  for bw in 1.25e9 3.1e9; do
    out=$tmp/plan_${n}_$bw.json
    if ! "$BIN" plan --profile "$VGG" --ranks "$n" --bandwidth "$bw" --profile-batch 128 --batch 128 \
         --bsp-batch $((128 * n)) --out "$out" >"$tmp/log" 2>&1; then
      echo "ranks $n bandwidth $bw: FAILED"; tail -5 "$tmp/log"; continue
    fi
    python3 - "$out" "$n" "$bw" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
n, bw = sys.argv[2], float(sys.argv[3])
pred = p["predicted"]
bsp = p["baselines"]["bsp"]
st = p["baselines"].get("straight")
sp_st = bsp["time_per_sample_s"] / st["time_per_sample_s"] if st else float("nan")
print("%-6s %-10s %-10s %-4d %-12s %11.4f %13.4f %10.2fx %10.1f%% %13.2fx %10.3f" % (
    n, "%.2f GB/s" % (bw / 1e9), p["schedule"], p["microbatches"], p["replication"],
    pred["time_per_sample_s"] * 1e3, bsp["time_per_sample_s"] * 1e3, p["speedup_vs_bsp"],
    100 * p["communication_reduction_vs_bsp"], sp_st, p["plan_seconds"]))
EOF
  done
done
cat <<'EOF'

paper (PipeDream, SOSP'19) for VGG-16: configurations like 7-1 and 15-1 (a replicated front of
convolutions, the dense layers on one worker), and 85-95% less communication than data parallelism.
"comm red." = 1 - network bytes per sample (activations + gradients + ring allreduce traffic) / bsp's;
"speedup" = bsp time per sample / the plan's, both replayed by the simulator with the published costs.
EOF
