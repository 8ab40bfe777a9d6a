# Kernel benchmark (issue 15; bench/README.md, "oneDNN kernels").
#   make bench-kernels   build/pt_bench_kernels (from bench/*.cpp, linking libpipetrain.a) and
#                        run bench/kernels.sh: the oneDNN matmul peak at 1024^3 in fp32 and bf16,
#                        and every training GEMM and convolution of the MLP, transformer and CNN
#                        on OpenBLAS fp32, oneDNN fp32 and oneDNN bf16 as fractions of it
BENCH_SRC := $(sort $(wildcard bench/*.cpp))
BENCH_OBJ := $(BENCH_SRC:%.cpp=$(BUILD)/obj/%.o)

.PHONY: bench-kernels

$(BUILD)/pt_bench_kernels: $(BENCH_OBJ) $(BUILD)/libpipetrain.a
	$(CXX) $(CXXFLAGS) -o $@ $(BENCH_OBJ) -Wl,--whole-archive $(BUILD)/libpipetrain.a -Wl,--no-whole-archive $(LDLIBS)

bench-kernels: $(BUILD)/pt_bench_kernels
	PT_BENCH_KERNELS=$(BUILD)/pt_bench_kernels bash bench/kernels.sh

-include $(BENCH_OBJ:.o=.d)
