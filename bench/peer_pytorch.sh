#!/usr/bin/env bash
# pipetrain vs PyTorch on one core: the Fashion-MNIST MLP and CNN (batch 128, SGD with
# momentum), alternating the two ROUNDS times. Both get one BLAS/OpenMP thread, the same
# OpenBLAS kernel and one pinned core; both are timed over 50-step intervals after the
# first interval (warm-up), median and range reported, and the ratio pipetrain/PyTorch
# of the medians. Needs `make deps-dev` (python3-torch). Usage: bench/peer_pytorch.sh [ROUNDS] [STEPS]
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=${1:-3}; steps=${2:-300}
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "SKIP: python3-torch is not installed (make deps-dev)"; exit 0; }
ct=$(best_coretype)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
[ -n "$ct" ] && export OPENBLAS_CORETYPE=$ct
core=$(( $(nproc) - 1 ))
out=${OUT:-runs/bench_peer}
mkdir -p "$out"
echo "one core (taskset -c $core), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, $steps steps per run, $rounds rounds, batch 128"
for model in mlp cnn; do
  deck=input/fashion_${model}.toml
  : >"$out/$model.pt" ; : >"$out/$model.torch"
  for r in $(seq 1 "$rounds"); do
    taskset -c "$core" "$PT_BIN" train "$deck" --set 'parallel.split=[]' --set parallel.microbatches=1 \
      --set train.max_steps="$steps" --set train.log_every=50 --set train.eval_batch_size=500 \
      --set run.output_dir="$out" --set run.name="${model}_r$r" --set checkpoint.at_end=false --set run.plots=false >"$out/${model}_r$r.log" 2>&1 ||
      { echo "pipetrain failed: $out/${model}_r$r.log"; exit 1; }
    grep '"type":"step"' "$out/${model}_r$r/metrics.jsonl" | tail -n +2 | grep -o '"samples_per_s":[0-9.e+]*' | cut -d: -f2 >>"$out/$model.pt"
    taskset -c "$core" /usr/bin/python3 tools/peer_pytorch.py "$model" "$steps" >"$out/${model}_torch_r$r.log" 2>&1 ||
      { echo "pytorch failed: $out/${model}_torch_r$r.log"; exit 1; }
    grep '^INTERVAL' "$out/${model}_torch_r$r.log" | tail -n +2 | awk '{print $2}' >>"$out/$model.torch"
  done
  read -r pm plo phi <<<"$(stats <"$out/$model.pt")"
  read -r tm tlo thi <<<"$(stats <"$out/$model.torch")"
  printf "%-4s pipetrain %8.0f samples/s (%.0f-%.0f)   PyTorch %8.0f (%.0f-%.0f)   ratio pipetrain/PyTorch %.2f\n" \
    "$model" "$pm" "$plo" "$phi" "$tm" "$tlo" "$thi" "$(awk -v a="$pm" -v b="$tm" 'BEGIN{print a/b}')"
done
grep -h '^LOSS' "$out"/*_torch_r1.log | sed 's/^/PyTorch: /'
