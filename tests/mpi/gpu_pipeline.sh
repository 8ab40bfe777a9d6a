#!/usr/bin/env bash
# GPU training (issue 8), 20 steps of the Fashion-MNIST CNN each:
#  - one rank on the GPU equals one rank on the CPU within GPU_RTOL (default 1e-3, relative
#    L2 per tensor: cuDNN/cuBLAS sum in another order than the host kernels);
#  - a 2-rank 1f1b pipeline whose ranks share one GPU equals the 1-rank GPU run within 1e-5
#    (the same kernels on the same shapes), its activations and gradients staged through
#    pinned host memory when MPI is not CUDA-aware;
#  - a 2-rank pipedream pipeline sharing the GPU equals the same pipedream run on the CPU
#    within GPU_RTOL;
#  - two data-parallel replicas sharing the GPU (the gradient allreduce of device buffers)
#    equal the 1-rank GPU run within 1e-5, with MPI and with PT_ALLREDUCE=nccl (NCCL when the
#    replicas have GPUs of their own; on one shared GPU the transport notes it and uses MPI).
# Skips (exit 0) with a message when no NVIDIA GPU is visible or no CUDA build exists, so it
# can sit in tests/mpi/ next to the CPU tests. PT_BIN (or build-cuda/pipetrain) is the binary.
set -u
cd "$(dirname "$0")/../.."
source tests/mpi/lib.sh

gpus() {  # number of visible NVIDIA GPUs, from nvidia-smi or the device nodes
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${n:-0}" -gt 0 ]; then echo "$n"; return; fi
  ls /dev/nvidia[0-9]* 2>/dev/null | wc -l
}
has_cuda() { [ -x "$1" ] && ldd "$1" 2>/dev/null | grep -q libcudart; }

ngpu=$(gpus)
if [ "$ngpu" -eq 0 ]; then
  echo "SKIP gpu_pipeline: no NVIDIA GPU visible (nvidia-smi -L lists none, no /dev/nvidia*); no GPU check was run"
  exit 0
fi
bin=$PT_BIN
has_cuda "$bin" || bin=build-cuda/pipetrain
if ! has_cuda "$bin"; then
  echo "SKIP gpu_pipeline: $ngpu GPU(s) visible but no CUDA build of pipetrain ($PT_BIN, build-cuda/pipetrain); run make cuda-build"
  exit 0
fi
PT_BIN=$bin
rtol=${GPU_RTOL:-1e-3}
echo "gpu_pipeline: $ngpu GPU(s), binary $PT_BIN, CPU-vs-GPU tolerance $rtol"

out=$(mktemp -d /tmp/pt_gpu.XXXXXX)
trap 'rm -rf "$out"' EXIT
cnn=input/fashion_cnn.toml
common=(--set train.max_steps=20 --set train.log_every=10 --set run.output_dir="$out" --set train.eval_batch_size=2000)
gpu=(--set run.device=cuda)
cpu=(--set run.device=cpu)
mb4=(--set parallel.microbatches=4)
if [ ! -d /usr/share/datasets/fashion-mnist ]; then  # e.g. a GPU machine without Debian's dataset package
  echo "  note: /usr/share/datasets/fashion-mnist is missing: synthetic data of the same shape (1x28x28, 10 classes)"
  common+=(--set data.source=synthetic --set 'data.shape=[1, 28, 28]' --set data.classes=10 --set data.train_samples=60000
           --set data.test_samples=10000)
fi

train "$out" cpu_ref 1 $cnn "${common[@]}" "${cpu[@]}" "${mb4[@]}"
train "$out" gpu_ref 1 $cnn "${common[@]}" "${gpu[@]}" "${mb4[@]}"
grep -h "device" "$out/gpu_ref.log" | head -2 | sed 's/^/  /'
compare "$out/cpu_ref" "$out/gpu_ref" "$rtol"
same_accuracy "$out/cpu_ref" "$out/gpu_ref" 0.01

# 2-stage 1f1b pipeline, both ranks on the same GPU
train "$out" gpu_1f1b 2 $cnn "${common[@]}" "${gpu[@]}" "${mb4[@]}" --set 'parallel.split=[4]' --set parallel.schedule=1f1b
grep -h "^transport" "$out/gpu_1f1b.log" | head -1 | sed 's/^/  /'
compare "$out/gpu_ref" "$out/gpu_1f1b" 1e-5

# 2-stage pipedream (asynchronous, weight stashing) on the shared GPU against the CPU
pd=(--set 'parallel.split=[4]' --set parallel.schedule=pipedream --set parallel.microbatches=1)
train "$out" cpu_pipedream 2 $cnn "${common[@]}" "${cpu[@]}" "${pd[@]}"
train "$out" gpu_pipedream 2 $cnn "${common[@]}" "${gpu[@]}" "${pd[@]}"
compare "$out/cpu_pipedream" "$out/gpu_pipedream" "$rtol"
same_accuracy "$out/cpu_pipedream" "$out/gpu_pipedream" 0.01

# two replicas of one stage: the allreduce of device gradients (MPI, then PT_ALLREDUCE=nccl)
dp=(--set 'parallel.split=[]' --set 'parallel.replicas=[2]' --set parallel.schedule=1f1b)
train "$out" gpu_dp_mpi 2 $cnn "${common[@]}" "${gpu[@]}" "${mb4[@]}" "${dp[@]}"
compare "$out/gpu_ref" "$out/gpu_dp_mpi" 1e-5
MPIRUN_FLAGS="$MPIRUN_FLAGS -x PT_ALLREDUCE=nccl" \
  train "$out" gpu_dp_nccl 2 $cnn "${common[@]}" "${gpu[@]}" "${mb4[@]}" "${dp[@]}"
grep -h "NCCL\|nccl" "$out/gpu_dp_nccl.log" | head -2 | sed 's/^/  /'
compare "$out/gpu_ref" "$out/gpu_dp_nccl" 1e-5
finish
