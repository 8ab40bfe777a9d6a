#!/usr/bin/env bash
# pipetrain vs PyTorch 1.13 on one core, interleaved rounds (pipetrain, PyTorch, pipetrain, ...):
#  - mlp, cnn: the Fashion-MNIST MLP and CNN (batch 128, SGD with momentum; tools/peer_pytorch.py),
#    timed over 50-step intervals, samples/s;
#  - resnet: input/fashion_resnet.toml (batch 128, SGD + Nesterov, batch norm), samples/s;
#  - tinygpt: input/tinygpt.toml (6 pre-LN blocks, D 256, T 128, batch 32, AdamW), tokens/s;
#  - gpt2_small: input/gpt2_small.toml (12 blocks, D 768, T 256, batch 16 in one microbatch,
#    AdamW, tied head), tokens/s, GPT_STEPS steps as tinygpt (about 6 s per step here in bf16).
#    For these two the PyTorch side (bench/peer_models.py) is the same model built from the
#    pipetrain run's deck.toml and weights_init.h5 by tools/to_pytorch.py, fed the same
#    batches (tools/pytorch_twin.py's port of the data order) with the same optimizer.
# Both sides get one BLAS/OpenMP thread, the same OpenBLAS kernel and one pinned core
# (taskset); the first logged interval of every run is dropped (warm-up); median and range
# over all rounds, and the ratio pipetrain/PyTorch of the medians against issue 24's goal (>= 1.2
# for every model in both precisions). Needs `make deps-dev` (python3-torch, python3-h5py).
# Precisions: PRECISIONS="fp32 bf16" (default both): pipetrain with train.precision, PyTorch in
# fp32 or under torch.autocast("cpu", bfloat16); rounds interleave the precisions too. The last
# lines give pipetrain bf16 over pipetrain fp32 per model and say which bf16 case the CPU is
# (AMX: goal >= 3x on the MLP and tinygpt; AVX512-BF16 only: goal >= 1.5x; neither: bf16 is
# emulated, no goal).
# Usage: bench/peer_pytorch.sh [ROUNDS=3] [STEPS=300] [MODELS="mlp cnn resnet tinygpt gpt2_small"]
#   STEPS is for mlp and cnn; resnet runs RESNET_STEPS=120 (intervals of 20), tinygpt
#   GPT_STEPS=30 (intervals of 5; about 3 s per step here, plus pipetrain's final evaluation
#   of the validation split, about 35 s, which is not timed).
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=${1:-3}; steps=${2:-300}; models=${3:-mlp cnn resnet tinygpt gpt2_small}
resnet_steps=${RESNET_STEPS:-120}; gpt_steps=${GPT_STEPS:-30}; precisions=${PRECISIONS:-fp32 bf16}
/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || { echo "SKIP: python3-torch or python3-h5py is not installed (make deps-dev)"; exit 0; }
ct=$(best_coretype)
ncores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS, which lib.sh sets to 1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
[ -n "$ct" ] && export OPENBLAS_CORETYPE=$ct
core=$(( ncores - 1 ))
out=${OUT:-runs/bench_peer}
mkdir -p "$out"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
fam=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); mod=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
echo "CPU: $cpu (family $fam, model $mod), $ncores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
case " $flags " in
  *" amx_bf16 "*) isa="AMX (amx_bf16)"; goal=3.0 ;;
  *" avx512_bf16 "*) isa="AVX512-BF16 (avx512_bf16, no AMX)"; goal=1.5 ;;
  *) isa="no bf16 instructions (bf16 is converted in software)"; goal=0 ;;
esac
echo "bf16 case: $isa"
echo "one core (taskset -c $core), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, $rounds rounds, interleaved; $(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)')"

# pt_run MODEL DECK ROUND STEPS INTERVAL PRECISION: pipetrain on one core, its per-interval
# rates appended to $out/MODEL_PRECISION.pt (the run is $out/MODEL_PRECISION_rROUND)
pt_run() {
  local model=$1 deck=$2 r=$3 n=$4 every=$5 prec=$6
  local name=${model}_${prec}_r$r
  taskset -c "$core" "$PT_BIN" train "$deck" --set 'parallel.split=[]' --set parallel.microbatches=1 --set train.precision="$prec" \
    --set train.max_steps="$n" --set train.log_every="$every" --set train.eval_every=0 --set run.initial_weights=true \
    --set run.output_dir="$out" --set run.name="$name" --set checkpoint.at_end=false --set run.plots=false \
    >"$out/$name.log" 2>&1 || { echo "pipetrain failed: $out/$name.log"; exit 1; }
  local field=samples_per_s; case $model in tinygpt|gpt2_small) field=tokens_per_s ;; esac
  grep '"type":"step"' "$out/$name/metrics.jsonl" | tail -n +2 | grep -o "\"$field\":[0-9.e+]*" | cut -d: -f2 >>"$out/${model}_$prec.pt"
}

# peer_round MODEL ROUND PRECISION: one pipetrain run and one PyTorch run; sets unit and col
peer_round() {
  local model=$1 r=$2 prec=$3 tag=${1}_${3}_r$2
  unit=samples/s; col=2
  case $model in
    mlp|cnn)
      pt_run "$model" "input/fashion_${model}.toml" "$r" "$steps" 50 "$prec"
      taskset -c "$core" /usr/bin/python3 tools/peer_pytorch.py "$model" "$steps" "$prec" >"$out/${tag}_torch.log" 2>&1 ||
        { echo "pytorch failed: $out/${tag}_torch.log"; exit 1; } ;;
    resnet)
      pt_run resnet input/fashion_resnet.toml "$r" "$resnet_steps" 20 "$prec"
      taskset -c "$core" /usr/bin/python3 bench/peer_models.py "$out/$tag" "$resnet_steps" 20 >"$out/${tag}_torch.log" 2>&1 ||
        { echo "pytorch failed: $out/${tag}_torch.log"; exit 1; } ;;
    tinygpt|gpt2_small)
      unit=tokens/s; col=3
      pt_run "$model" "input/$model.toml" "$r" "$gpt_steps" 5 "$prec"
      taskset -c "$core" /usr/bin/python3 bench/peer_models.py "$out/$tag" "$gpt_steps" 5 >"$out/${tag}_torch.log" 2>&1 ||
        { echo "pytorch failed: $out/${tag}_torch.log"; exit 1; } ;;
    *) echo "unknown model '$model' (mlp, cnn, resnet, tinygpt, gpt2_small)"; exit 2 ;;
  esac
  grep '^INTERVAL' "$out/${tag}_torch.log" | tail -n +2 | awk -v c="$col" '{print $c}' >>"$out/${model}_$prec.torch"
}

for model in $models; do
  for prec in $precisions; do : >"$out/${model}_$prec.pt"; : >"$out/${model}_$prec.torch"; done
  for r in $(seq 1 "$rounds"); do
    for prec in $precisions; do peer_round "$model" "$r" "$prec"; done
  done
  for prec in $precisions; do
    f=$out/${model}_$prec
    [ -s "$f.pt" ] && [ -s "$f.torch" ] || { echo "$model $prec: no intervals measured (too few steps?)"; exit 1; }
    read -r pm plo phi <<<"$(stats <"$f.pt")"
    read -r tm tlo thi <<<"$(stats <"$f.torch")"
    ratio=$(awk -v a="$pm" -v b="$tm" 'BEGIN{print a/b}')
    printf "%-8s %-5s pipetrain %8.0f %s (%.0f-%.0f)   PyTorch %8.0f (%.0f-%.0f)   ratio pipetrain/PyTorch %.2f   (%d+%d intervals; goal >= 1.2: %s)\n" \
      "$model" "$prec" "$pm" "$unit" "$plo" "$phi" "$tm" "$tlo" "$thi" "$ratio" \
      "$(wc -l <"$f.pt")" "$(wc -l <"$f.torch")" "$(awk -v r="$ratio" 'BEGIN{print (r >= 1.2 ? "PASS" : "FAIL")}')"
  done
done
# pipetrain bf16 over fp32 per model (medians), against the goal for this CPU's bf16 case
case " $precisions " in *" fp32 "*) case " $precisions " in *" bf16 "*)
  for model in $models; do
    m32=$(stats <"$out/${model}_fp32.pt" | awk '{print $1}'); m16=$(stats <"$out/${model}_bf16.pt" | awk '{print $1}')
    t32=$(stats <"$out/${model}_fp32.torch" | awk '{print $1}'); t16=$(stats <"$out/${model}_bf16.torch" | awk '{print $1}')
    r16=$(awk -v a="$m16" -v b="$m32" 'BEGIN{print a/b}')
    verdict=""
    case $model in mlp|tinygpt) [ "$goal" != 0 ] &&
      verdict="; goal >= ${goal}x: $(awk -v r="$r16" -v g="$goal" 'BEGIN{print (r >= g ? "PASS" : "FAIL")}')" ;; esac
    printf "%-8s bf16/fp32: pipetrain %.2f, PyTorch %.2f   (CPU case: %s%s)\n" "$model" \
      "$r16" "$(awk -v a="$t16" -v b="$t32" 'BEGIN{print a/b}')" "$isa" "$verdict"
  done ;; esac ;;
esac
for model in $models; do for prec in $precisions; do grep -h '^LOSS' "$out/${model}_${prec}_r1_torch.log" | sed "s/^/PyTorch $model: /"; done; done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
