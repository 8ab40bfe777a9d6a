// Precision names (train.precision). The bf16 operations themselves are Backend primitives
// (backend.hpp: round_bf16, pack_bf16, unpack_bf16), implemented by each backend on its own
// memory: src/kernels/host/host_memory.cpp and src/kernels/cuda/cuda_bf16.cu.
#include <string>

#include "pipetrain/backend.hpp"

namespace pt {

Precision precision_from_name(const std::string& name) { return enum_from_name<Precision>(name).value_or(Precision::fp32); }

}  // namespace pt
