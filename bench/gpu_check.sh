#!/usr/bin/env bash
# The GPU check (issue 8): the one script to run whenever a GPU machine (an H200) is
# available. Sized to finish in under 5 minutes there; needs no network. It
#   1. records the machine (GPU, driver, CUDA, MPI's CUDA-awareness),
#   2. builds with CUDA=1 (make cuda-build cuda-tests; CUDA_ARCH defaults to sm_90),
#   3. runs the GPU unit tests (every backend op and a stage with every layer, GPU vs CPU)
#      and tests/mpi/gpu_pipeline.sh (GPU vs CPU training, 2-rank pipelines sharing the GPU),
#   4. trains the Fashion-MNIST CNN (input/fashion_cnn.toml) for STEPS steps (default 300) on
#      1 rank and on 2 ranks sharing the GPU (1f1b with 4 microbatches, and pipedream), and
#      the same runs on the CPU for CPU_STEPS steps (default 60: a rate needs fewer), and
#      prints samples/s for each,
#   6. tensor parallelism: tinygpt at t = 1, t = 2 and t = 2 with sequence_parallel (device = node-local rank mod GPUs),
#   5. the bf16 pass (docs/PRECISION.md): the CudaBf16* unit tests by name (cuBLAS GemmEx and
#      cuDNN bf16 against the host's oneDNN bf16), both precisions' 1024^3 matmul peak of the
#      GPU and of the CPU (pipetrain profile prints them), and, when the decks have
#      train.precision, the 1-rank and 2-rank GPU runs and the 1-rank CPU run in bf16.
# Everything (build output, test output, the throughput table) goes to one log file,
# LOG (default runs/gpu_check/gpu_check-DATE.log), next to a CSV of the runs.
# Usage: bench/gpu_check.sh [STEPS]   (env: CPU_STEPS, CUDA_ARCH, GPU_RTOL, LOG, OUT, PREBUILT=1 to
# use build-cuda/ as it is: on a machine without our Debian libraries, bench/gpu_device.sh)
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
steps=${1:-${STEPS:-300}}
cpu_steps=${CPU_STEPS:-60}
out=${OUT:-runs/gpu_check}
mkdir -p "$out"
stamp=$(date +%Y%m%d-%H%M%S)
log=${LOG:-$out/gpu_check-$stamp.log}
csv=$out/gpu_check-$stamp.csv
exec > >(tee -a "$log") 2>&1
t0=$(date +%s)
failed=()
section() { echo; echo "== $* [$(($(date +%s) - t0))s]"; }

section "machine"
date -u
uname -srm
echo "CPU cores: $(getconf _NPROCESSORS_ONLN)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv 2>&1 | head -9
else
  echo "nvidia-smi: not found"
fi
/usr/local/cuda/bin/nvcc --version 2>&1 | tail -2
mpirun --version 2>&1 | head -1
ompi_info --parsable --all 2>/dev/null | grep -m1 'mpi_built_with_cuda_support:value' || echo "ompi_info: no CUDA-support line"
if ! nvidia-smi -L >/dev/null 2>&1 && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "no NVIDIA GPU visible: this script is for a GPU machine (the GPU tests would only skip)"
  exit 1
fi

if [ "${PREBUILT:-0}" = 1 ]; then  # bench/gpu_device.sh: binaries built elsewhere (bench/gpu_bundle.sh)
  section "build: prebuilt build-cuda/pipetrain and build-cuda/pt_tests (PREBUILT=1)"
  for b in build-cuda/pipetrain build-cuda/pt_tests; do
    [ -x "$b" ] || { echo "FAIL: PREBUILT=1 but $b is missing"; exit 1; }
    if ldd "$b" | grep "not found"; then echo "FAIL: $b cannot find the libraries above"; exit 1; fi
  done
else
  section "build: make cuda-build cuda-tests (CUDA_ARCH=${CUDA_ARCH:-sm_90})"
  if ! make -j"$(getconf _NPROCESSORS_ONLN)" cuda-build cuda-tests; then
    echo "FAIL: the CUDA build"
    exit 1
  fi
fi
bin=build-cuda/pipetrain

section "GPU unit tests: build-cuda/pt_tests --gtest_filter='Cuda*'"
timeout --kill-after=10 600 $MPIRUN $MPIRUN_FLAGS -np 1 build-cuda/pt_tests --gtest_filter='Cuda*' || failed+=("GPU unit tests")

section "GPU pipeline tests: tests/mpi/gpu_pipeline.sh"
PT_BIN=$bin timeout --kill-after=10 900 bash tests/mpi/gpu_pipeline.sh || failed+=("gpu_pipeline.sh")

section "throughput: Fashion-MNIST CNN, batch 128; GPU $steps steps, CPU $cpu_steps steps"
data=()
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  # same shapes and classes, so the same work per sample; noted in the table
  echo "note: /usr/share/datasets/fashion-mnist is missing: synthetic data of the same shape (1x28x28, 10 classes)"
  data=(--set data.source=synthetic --set 'data.shape=[1, 28, 28]' --set data.classes=10 --set data.train_samples=60000
        --set data.test_samples=10000)
fi
ct=$(best_coretype)
[ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$ct}
echo "CPU runs: OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-default}"
echo "run,device,ranks,schedule,microbatches,steps,samples_per_s,test_accuracy,train_wall_s" >"$csv"
rows=()
bench_run() {  # name device ranks schedule microbatches steps [extra --set ...]
  local name=$1 dev=$2 np=$3 sched=$4 M=$5 n=$6; shift 6
  local args=(--set run.device="$dev" --set parallel.schedule="$sched" --set parallel.microbatches="$M"
              --set train.max_steps="$n" --set train.log_every=100000 --set train.eval_batch_size=2000
              --set run.output_dir="$out" --set run.name="$name" --set run.plots=false)
  [ "$np" = 2 ] && args+=(--set 'parallel.split=[4]')
  if ! timeout --kill-after=10 300 $MPIRUN $MPIRUN_FLAGS -np "$np" "$bin" train input/fashion_cnn.toml "${data[@]}" \
      "${args[@]}" "$@" >"$out/$name.log" 2>&1; then
    echo "FAIL: run $name (log $out/$name.log):"
    tail -15 "$out/$name.log"
    failed+=("run $name")
    return
  fi
  local s="$out/$name/summary.json"
  local sps acc wall
  sps=$(json_get "$s" samples_per_s); acc=$(json_get "$s" final_test_accuracy); wall=$(json_get "$s" train_wall_s)
  echo "$name,$dev,$np,$sched,$M,$n,$sps,$acc,$wall" >>"$csv"
  rows+=("$(printf "%-22s %-5s %5s %-10s %3s %6s %12.1f %9.4f %9.2f" "$name" "$dev" "$np" "$sched" "$M" "$n" "$sps" "$acc" "$wall")")
  echo "  $name: $(grep -h '^PERF' "$out/$name.log")"
}
bench_run gpu_1rank cuda 1 1f1b 1 "$steps"
grep -h "^pipetrain:" "$out/gpu_1rank.log" | sed 's/^/  /'
bench_run gpu_2rank_1f1b cuda 2 1f1b 4 "$steps"
grep -h "^transport" "$out/gpu_2rank_1f1b.log" | sed 's/^/  /'
bench_run gpu_2rank_pipedream cuda 2 pipedream 1 "$steps"
bench_run cpu_1rank cpu 1 1f1b 1 "$cpu_steps"
bench_run cpu_2rank_1f1b cpu 2 1f1b 4 "$cpu_steps"
bench_run cpu_2rank_pipedream cpu 2 pipedream 1 "$cpu_steps"
# the GPU's per-layer times (CUDA events) at microbatch 128
timeout 120 "$bin" profile input/fashion_cnn.toml "${data[@]}" --set run.device=cuda --reps 10 \
  --out "$out/gpu_profile-$stamp.json" >"$out/gpu_profile.log" 2>&1 && sed 's/^/  /' "$out/gpu_profile.log" || echo "  (profile failed: $out/gpu_profile.log)"

section "bf16 pass: CudaBf16* tests, matmul peaks in both precisions, bf16 training when the decks have it"
timeout --kill-after=10 300 $MPIRUN $MPIRUN_FLAGS -np 1 build-cuda/pt_tests --gtest_filter='CudaBf16*:*BackendContract*/cuda:CudaOps.Bf16OpsAgainstTheHost' || failed+=("GPU bf16 unit tests")
for dev in cuda cpu; do
  timeout 180 "$bin" profile input/fashion_cnn.toml "${data[@]}" --set run.device=$dev --reps 3 2>&1 | grep "^matmul peak" |
    sed "s/^/  $dev: /" || echo "  ($dev profile failed)"
done
if "$bin" keys 2>/dev/null | grep -q '^train.precision'; then
  bench_run gpu_1rank_bf16 cuda 1 1f1b 1 "$steps" --set train.precision=bf16
  bench_run gpu_2rank_1f1b_bf16 cuda 2 1f1b 4 "$steps" --set train.precision=bf16
  bench_run cpu_1rank_bf16 cpu 1 1f1b 1 "$cpu_steps" --set train.precision=bf16
else
  echo "  bf16 training skipped: this build's decks have no train.precision key yet (the kernels are checked above)"
fi

section "tensor parallelism (parallel.tensor, issue 25): tinygpt t = 1 on 1 rank, t = 2 on 2 ranks, and with sequence parallelism"
# Each rank takes device (node-local rank) mod (visible GPUs) (cuda::choose_device): with 2
# GPUs the two tensor ranks have one each; with one they share it, which checks the split
# layers and the tensor sums (the transport's allreduce) on device buffers, not a speed-up.
echo "  GPUs: $(nvidia-smi -L 2>/dev/null | wc -l); tensor rank k on device k mod that"
tcorpus="$out/tensor_corpus.txt"
cat $(ls -d /usr/share/games/fortunes/* 2>/dev/null | grep -v "\.") 2>/dev/null | head -c 65536 >"$tcorpus"
[ -s "$tcorpus" ] || head -c 65536 /dev/urandom | base64 >"$tcorpus"
tset=(--set data.path="$tcorpus" --set data.seq_len=64 --set train.batch_size=8 --set parallel.split=[] --set train.max_steps=20
      --set parallel.schedule=1f1b --set parallel.microbatches=2 --set run.device=cuda --set run.plots=false
      --set checkpoint.at_end=false --set train.log_every=1 --set run.output_dir="$out" --set train.eval_batch_size=16)
# "2s": t = 2 with sequence_parallel in every block (reduce-scatters as whole sums on device)
for tv in 1 2 2s; do
  t=${tv%s} seq=()
  [ "$tv" != "$t" ] && for b in 1 2 3 4 5 6; do seq+=(--set model.layers.$b.sequence_parallel=true); done
  if timeout --kill-after=10 300 $MPIRUN $MPIRUN_FLAGS -np $t "$bin" train input/tinygpt.toml "${tset[@]}" "${seq[@]}" \
      --set parallel.tensor=$t --set run.name=gpu_tensor$tv >"$out/gpu_tensor$tv.log" 2>&1; then
    echo "  t = $tv: $(grep -h '^PERF' "$out/gpu_tensor$tv.log")"
    echo "  t = $tv: last loss $(grep -o '"loss":[^,]*' "$out/gpu_tensor$tv/metrics.jsonl" | tail -1)"
  else
    echo "  t = $tv FAILED:"; tail -15 "$out/gpu_tensor$tv.log"; failed+=("tensor t=$tv")
  fi
done

section "summary"
printf "%-22s %-5s %5s %-10s %3s %6s %12s %9s %9s\n" run dev ranks schedule M steps "samples/s" "test acc" "train s"
for r in "${rows[@]}"; do echo "$r"; done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.1fx", a / b; else print "?" }'; }
sps_of() { grep "^$1," "$csv" | cut -d, -f7; }
echo "GPU / CPU samples/s: 1 rank $(ratio "$(sps_of gpu_1rank)" "$(sps_of cpu_1rank)"), 2 ranks 1f1b $(ratio "$(sps_of gpu_2rank_1f1b)" "$(sps_of cpu_2rank_1f1b)"), 2 ranks pipedream $(ratio "$(sps_of gpu_2rank_pipedream)" "$(sps_of cpu_2rank_pipedream)")"
if grep -q "^gpu_1rank_bf16," "$csv"; then
  echo "bf16 / fp32 samples/s: GPU 1 rank $(ratio "$(sps_of gpu_1rank_bf16)" "$(sps_of gpu_1rank)"), GPU 2 ranks 1f1b $(ratio "$(sps_of gpu_2rank_1f1b_bf16)" "$(sps_of gpu_2rank_1f1b)"), CPU 1 rank $(ratio "$(sps_of cpu_1rank_bf16)" "$(sps_of cpu_1rank)")"
fi
echo "total $(($(date +%s) - t0)) s; log $log; CSV $csv"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_check: all passed"
