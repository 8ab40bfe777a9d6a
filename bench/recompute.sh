#!/usr/bin/env bash
# Activation recomputation on gpt2_small (issue 23; bench/README.md, "Recomputation"):
# input/gpt2_small.toml (GPT-2 small, microbatches of 4 x 256 tokens, bf16, 1f1b) on 2 ranks
# under parallel.recompute = none, full and selective, interleaved (REPS rounds of the three),
# STEPS steps each with the first (allocation and kernel warm-up) left out. Per mode: the step
# time (each run's median over steps 2..STEPS; the median and range over the runs), the
# activation bytes one in-flight microbatch keeps (the pools' accounting in summary.json:
# activation_bytes_per_microbatch, largest rank), every activation buffer of a rank (unit slots
# and recompute buffers), and the resident peak (VmHWM, largest rank); then the ratios against
# none. Goal: full keeps >= 5x less per in-flight microbatch at <= 1.4x the step time.
# The corpus is the first 120 kB of the fortunes text files (a short test split, so the
# evaluation at the end stays short; train.eval_batch_size 4 keeps its buffers small).
# Usage: bash bench/recompute.sh [REPS=3] [STEPS=5]   (output in runs/bench_recompute/)
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
REPS=${1:-3}
STEPS=${2:-5}
out=runs/bench_recompute
mkdir -p "$out"
corpus=$out/corpus.txt
if [ ! -s "$corpus" ]; then
  for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat|*.u8) ;; *) [ -f "$f" ] && cat "$f" ;; esac
  done | head -c 120000 >"$corpus"
fi
modes=(none full selective)
echo "gpt2_small on 2 ranks, $REPS rounds x ${modes[*]}, $STEPS steps each; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
for rep in $(seq 1 "$REPS"); do
  for mode in "${modes[@]}"; do
    name=${mode}_$rep
    timeout --kill-after=10 3600 $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" train input/gpt2_small.toml \
      --set run.output_dir="$out" --set run.name="$name" --set data.path="$corpus" --set parallel.recompute="$mode" \
      --set train.max_steps="$STEPS" --set train.log_every=1 --set train.warmup_steps=1 --set train.eval_every=0 \
      --set train.eval_batch_size=4 --set checkpoint.at_end=false --set run.plots=false >"$out/$name.log" 2>&1 \
      || { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
    echo "  round $rep $mode: $(grep -h '^PERF' "$out/$name.log" | grep -o 'samples_per_s=[^ ]*')"
  done
done
python3 - "$out" "$REPS" "${modes[@]}" <<'EOF'
import json, statistics, sys
out, reps, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def run(mode, rep):
    d = f"{out}/{mode}_{rep}"
    steps = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"type":"step"' in l]
    t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(steps, steps[1:])]  # steps 2.., the first left out
    s = json.load(open(f"{d}/summary.json"))
    ranks = s["per_rank"]
    return {"step": statistics.median(t), "unit": max(r["activation_bytes_per_microbatch"] for r in ranks),
            "act": max(r["activation_bytes"] for r in ranks), "rec": max(r.get("recompute_bytes", 0) for r in ranks),
            "rss": max(r.get("peak_rss_bytes", 0) for r in ranks), "inflight": [r["max_in_flight"] for r in ranks]}
res = {m: [run(m, r) for r in range(1, reps + 1)] for m in modes}
def med(m, k): return statistics.median(x[k] for x in res[m])
def rng(m, k): return min(x[k] for x in res[m]), max(x[k] for x in res[m])
print(f"\n| recompute | step time s (median, range) | kept per in-flight microbatch | activation buffers per rank (recompute buffers) | resident peak per rank |")
print("|---|---|---|---|---|")
for m in modes:
    lo, hi = rng(m, "step")
    print(f"| {m} | {med(m, 'step'):.2f} ({lo:.2f}-{hi:.2f}) | {med(m, 'unit') / 1e6:.1f} MB | {med(m, 'act') / 1e6:.1f} MB "
          f"({med(m, 'rec') / 1e6:.1f} MB) | {med(m, 'rss') / 1e9:.2f} GB |")
print(f"\nunits in flight per rank: {res['none'][0]['inflight']}")
for m in modes[1:]:
    t = [x["step"] / y["step"] for x, y in zip(res[m], res["none"])]  # per round: same conditions
    print(f"{m}: {med('none', 'unit') / med(m, 'unit'):.1f}x less kept per in-flight microbatch, "
          f"{med('none', 'act') / med(m, 'act'):.2f}x less in activation buffers, step time {statistics.median(t):.3f}x none "
          f"(rounds {min(t):.3f}-{max(t):.3f})")
EOF
