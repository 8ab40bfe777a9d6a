# CUDA build and GPU tests (issue 8). The CPU build (`make`) never needs CUDA.
#   make cuda-build   build-cuda/pipetrain with CUDA=1 (compile and link only: CI runs it; no GPU needed)
#   make cuda-tests   build-cuda/pt_tests, which adds tests/unit/test_cuda.cpp
#   make test-gpu     both, then the GPU unit tests (Cuda*) and tests/mpi/gpu_pipeline.sh;
#                     each skips with a message when no GPU is visible
#   make gpu-check    bench/gpu_check.sh: the whole GPU check for a machine with a GPU
#   (a GPU machine without our Debian libraries: bench/gpu_bundle.sh here, then bench/gpu_device.sh there)
# CUDA_ARCH (default sm_90) and CUDA_HOME / CUDNN_HOME / NCCL_HOME are passed through.
CUDA_BUILD ?= build-cuda

.PHONY: cuda-build cuda-tests test-gpu gpu-check

cuda-build:
	@$(SUBMAKE) CUDA=1 BUILD=$(CUDA_BUILD) $(CUDA_BUILD)/pipetrain

cuda-tests: cuda-build  # after it: two sub-makes must not build the same objects at once
	@$(SUBMAKE) CUDA=1 BUILD=$(CUDA_BUILD) $(CUDA_BUILD)/pt_tests

test-gpu: cuda-tests
	$(MPIRUN) $(MPIFLAGS) -np 1 $(CUDA_BUILD)/pt_tests --gtest_filter='Cuda*' --gtest_brief=1
	PT_BIN=$(CUDA_BUILD)/pipetrain bash tests/mpi/gpu_pipeline.sh

gpu-check:
	bash bench/gpu_check.sh
