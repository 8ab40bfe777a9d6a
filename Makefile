# pipetrain: build, test, run, bench. `make` builds build/pipetrain; `make run` and
# `make test` first install missing Debian packages (as root) via tools/deps.sh.
SHELL := /bin/bash
.DEFAULT_GOAL := all

BUILD   ?= build
RANKS   ?= 2
DECK    ?= input/fashion_mlp.toml
ARGS    ?=
ARCH    ?= -march=native
OPT     ?= -O3
CUDA    ?= 0
CUDA_ARCH ?= sm_90
NVCC    ?= /usr/local/cuda/bin/nvcc
MPIRUN  ?= mpirun
# run/test build first with JOBS parallel compiles (all cores) unless make was given -j itself
JOBS    ?= $(shell nproc)
SUBMAKE  = $(MAKE) --no-print-directory $(if $(findstring -j,$(MAKEFLAGS)),,-j$(JOBS))
# mpirun as root needs --allow-run-as-root; --oversubscribe lets tests run more ranks than cores
MPIFLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-run-as-root,) --oversubscribe
export OMPI_MCA_btl_vader_single_copy_mechanism ?= none
export OMPI_MCA_rmaps_base_oversubscribe ?= 1

CXX      := mpicxx
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5-openmpi 2>/dev/null)
HDF5_LIBS   := $(shell pkg-config --libs hdf5-openmpi 2>/dev/null)
CPPFLAGS := -DOMPI_SKIP_MPICXX -Iinclude -isystem /usr/include/trilinos $(HDF5_CFLAGS)
# -fno-math-errno: std::sqrt without an errno branch, so loops with a square root vectorize
# (the AdamW update: 2.5x). IEEE sqrt gives the same bits and no reassociation is allowed:
# weights bitwise unchanged (tinygpt, MLP, CNN, ResNet; bench/README.md, 2026-12-06).
# -Wno-psabi: vec_math.hpp's 16-float vectors are passed between inline functions; without
# AVX512 (an AVX2-only CPU under -march=native) GCC notes that their ABI differs from an
# AVX512 build's, which matters only across separately built libraries (none here).
CXXFLAGS := -std=c++17 $(OPT) $(ARCH) -fno-math-errno -g -Wall -Wextra -Wno-unused-parameter -Wno-psabi -MMD -MP
LDLIBS   := -ltrilinos_kokkoskernels -ltrilinos_kokkoscore -ldnnl -lgomp -lopenblas $(HDF5_LIBS) -ltomlplusplus -lz -ldl

SRC := $(shell find src -name '*.cpp' ! -name main.cpp ! -name cuda_stub.cpp | sort)
TEST_SRC := $(shell find tests/unit -name '*.cpp' | sort)
ifeq ($(CUDA),1)
  # The CUDA toolkit ships cuBLAS, cuDNN (cudnn.h) and NCCL (nccl.h) under one prefix here;
  # CUDNN_HOME / NCCL_HOME point elsewhere where they are installed separately.
  CUDA_HOME  ?= /usr/local/cuda
  CUDNN_HOME ?= $(CUDA_HOME)
  NCCL_HOME  ?= $(CUDA_HOME)
  CUDA_INC   := $(sort -I$(CUDA_HOME)/include -I$(CUDNN_HOME)/include -I$(NCCL_HOME)/include)
  CUDA_LIBDIRS := $(sort $(CUDA_HOME)/lib64 $(CUDNN_HOME)/lib64 $(NCCL_HOME)/lib64)
  CUDA_SRC := $(shell find src/kernels/cuda -name '*.cu' | sort)
  CPPFLAGS += -DPT_CUDA $(CUDA_INC)
  LDLIBS   += $(foreach d,$(CUDA_LIBDIRS),-L$(d) -Wl,-rpath,$(d)) -lcudnn -lcublas -lcudart -lnccl
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  # nvcc sees only what the .cu files need: our headers, CUDA's, and MPI's (the transport)
  MPI_INC  := $(filter -I%,$(shell $(CXX) --showme:compile 2>/dev/null))
  NVCCFLAGS ?= -std=c++17 -O3 -arch=$(CUDA_ARCH) -g -lineinfo --expt-relaxed-constexpr \
               -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -MMD -MP
  NVCC_CPPFLAGS := -DOMPI_SKIP_MPICXX -DPT_CUDA -Iinclude $(CUDA_INC) $(MPI_INC)
else
  SRC += src/kernels/cuda_stub.cpp
  CUDA_OBJ :=
  TEST_SRC := $(filter-out tests/unit/test_cuda.cpp,$(TEST_SRC))  # GPU tests need CUDA=1
endif
OBJ  := $(SRC:%.cpp=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.cpp=$(BUILD)/obj/%.o)

.PHONY: all deps deps-dev deps-check run test test-more test-unit test-mpi test-faults test-slurm bench clean docs help

all: $(BUILD)/deps.ok $(BUILD)/pipetrain

help:
	@echo "make            build build/pipetrain (CUDA=1 adds the GPU backend)"
	@echo "make run        train $(DECK) on RANKS=$(RANKS) ranks (installs dependencies first);"
	@echo "                ARGS=\"--set key=value ...\" overrides deck keys"
	@echo "make test       the tests: unit (np 1, 2, 3, 4) and each MPI integration suite's core"
	@echo "make test-more  the integration suites' longer parts (CI runs both)"
	@echo "make test-repeat N=10   make test's runs N times, the last N/2 with one core busy; pass counts per test"
	@echo "make bench      benchmarks (see bench/README.md)"
	@echo "make deps       install missing Debian packages (root), python3-matplotlib for the plots included"
	@echo "make deps-dev   also python3-torch, python3-h5py (fixtures, peers, tools/to_pytorch.py)"

# Dependency check: a ✓/✗ line per dependency; a missing one stops the build with the package name.
$(BUILD)/deps.ok: tools/deps.sh
	@mkdir -p $(BUILD)
	@bash tools/deps.sh check
	@touch $@

deps-check:
	@bash tools/deps.sh check

deps:
	@bash tools/deps.sh install

deps-dev:
	@bash tools/deps.sh install-dev

$(BUILD)/pipetrain: $(BUILD)/obj/src/main.o $(BUILD)/libpipetrain.a
	$(CXX) $(CXXFLAGS) -o $@ $(BUILD)/obj/src/main.o -Wl,--whole-archive $(BUILD)/libpipetrain.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/libpipetrain.a: $(OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/obj/%.o: %.cpp | $(BUILD)/deps.ok
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(BUILD)/deps.ok
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_CPPFLAGS) -c $< -o $@

$(BUILD)/pt_tests: $(TEST_OBJ) $(BUILD)/libpipetrain.a
	$(CXX) $(CXXFLAGS) -o $@ $(TEST_OBJ) -Wl,--whole-archive $(BUILD)/libpipetrain.a -Wl,--no-whole-archive -lgtest $(LDLIBS) -lpthread

# ---- run ---------------------------------------------------------------------------
run:
	@bash tools/deps.sh quiet || bash tools/deps.sh install
	@$(SUBMAKE) all
	$(MPIRUN) $(MPIFLAGS) -np $(RANKS) $(BUILD)/pipetrain train $(DECK) $(ARGS)

# ---- tests -------------------------------------------------------------------------
test:
	@bash tools/deps.sh quiet || bash tools/deps.sh install
	@$(SUBMAKE) all $(BUILD)/pt_tests
	@bash tests/run_tests.sh

# the integration suites' longer parts (resharding, every schedule's resume, negative controls...);
# CI runs it after make test
test-more:
	@bash tools/deps.sh quiet || bash tools/deps.sh install
	@$(SUBMAKE) all $(BUILD)/pt_tests
	@bash tests/run_tests.sh more

test-unit: all $(BUILD)/pt_tests
	@bash tests/run_tests.sh unit

test-mpi: all $(BUILD)/pt_tests
	@bash tests/run_tests.sh mpi

bench: all
	@bash bench/run_all.sh

docs: all
	$(BUILD)/pipetrain keys --markdown > docs/DECK.md

clean:
	rm -rf $(BUILD)

-include $(OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(CUDA_OBJ:.o=.d) $(BUILD)/obj/src/main.d

# Feature fragments (one file per area, e.g. mk/slurm.mk) add their own targets.
-include mk/*.mk
