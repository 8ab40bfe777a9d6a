#!/usr/bin/env bash
# Time to accuracy, the PipeDream paper's metric: bsp, gpipe, 1f1b, pipedream, pipedream-vsync,
# 2bw and pipedream-nostash on the same deck and ranks (default: the CNN on 2 ranks, pipelines
# split at layer 3 with 4 microbatches, evaluation every 78 steps, target 0.88). Writes
# runs/bench_time_to_accuracy/{time_to_accuracy.csv, .md, .png} (accuracy against wall time).
# Options: tools/studies.py accuracy --help
#
# bench/time_to_accuracy.sh tinygpt [--set key=value]...: input/tinygpt.toml on 2 ranks
# (`mpirun -np 2 build/pipetrain train`, parallel.split = "auto": the planner picks the layout)
# against PyTorch DistributedDataParallel with 2 processes (gloo, bench/ddp_baseline.py) on the
# same data: the same minibatches of 32 windows (each DDP rank a disjoint half), the same
# initial weights (pipetrain's weights_init.h5), AdamW with the same warm-up and cosine
# schedule, the validation split evaluated every EVAL_EVERY (100) steps on both sides; time is
# training time without evaluation. Each side runs until the deck's target (2.4 bits/byte) or
# BUDGET (900) seconds of wall time, whichever comes first, then bench/tta_report.py prints
# both curves and the time to 3.0, 2.5 and 2.0 bits/byte (TARGETS). Writes
# runs/bench_tta_tinygpt/ (OUT): pipetrain/ (the run), ddp.jsonl, report.txt,
# time_to_accuracy_tinygpt.png. Further arguments (--set key=value) go to pipetrain; the
# baseline reads the effective deck it wrote.
set -eu
cd "$(dirname "$0")/.."
source bench/lib.sh
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE_BENCH:-$ct}
if [ "${1:-}" != tinygpt ]; then
  exec /usr/bin/python3 tools/studies.py accuracy "$@"
fi
shift
/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || { echo "SKIP: python3-torch or python3-h5py is not installed (make deps-dev)"; exit 0; }
budget=${BUDGET:-900}; every=${EVAL_EVERY:-100}; out=${OUT:-runs/bench_tta_tinygpt}; targets=${TARGETS:-3.0,2.5,2.0}
mkdir -p "$out"; rm -rf "$out/pipetrain" "$out/ddp.jsonl"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
  echo "CPU: $cpu (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')), $(env -u OMP_NUM_THREADS nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "budget ${budget} s wall per side, evaluation every $every steps, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
} | tee "$out/report.txt"
set +e
# pipetrain: stopped by SIGTERM at the budget (its metrics.jsonl has every evaluation so far)
pt_train() {
  timeout -s TERM --kill-after=60 "$budget" $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" train input/tinygpt.toml \
    --set train.eval_every="$every" --set run.initial_weights=true --set run.output_dir="$out" --set run.name=pipetrain \
    --set run.plots=false --set checkpoint.at_end=false "$@" >"$out/pipetrain.log" 2>&1
}
pt_train "$@"
rc=$?
echo "pipetrain: exit $rc$([ $rc = 124 ] && echo ' (stopped at the budget)'); $(grep -m1 '^layout' "$out/pipetrain.log"); $(grep -m1 '^schedule' "$out/pipetrain.log")" | tee -a "$out/report.txt"
[ -f "$out/pipetrain/weights_init.h5" ] || { echo "pipetrain wrote no weights_init.h5: $out/pipetrain.log"; tail -20 "$out/pipetrain.log"; exit 1; }
timeout -s TERM --kill-after=60 $((budget + 300)) /usr/bin/python3 bench/ddp_baseline.py "$out/pipetrain" --out "$out/ddp.jsonl" \
  --ranks 2 --eval-every "$every" --budget "$budget" >"$out/ddp.log" 2>&1
rc=$?
echo "PyTorch DDP: exit $rc; $(head -1 "$out/ddp.log")" | tee -a "$out/report.txt"
[ -s "$out/ddp.jsonl" ] || { echo "the DDP baseline wrote nothing: $out/ddp.log"; tail -20 "$out/ddp.log"; exit 1; }
/usr/bin/python3 bench/tta_report.py "$out/pipetrain" "$out/ddp.jsonl" --targets "$targets" \
  --plot "$out/time_to_accuracy_tinygpt.png" | tee -a "$out/report.txt"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/report.txt"
