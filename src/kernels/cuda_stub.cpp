// The CUDA backend's entry points in a build without CUDA=1.
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/transport.hpp"

namespace pt {

bool cuda_backend_compiled() { return false; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  fail(Exit::bad_input, "run.device = \"cuda\" needs a build with CUDA support: make CUDA=1", true);
}

std::unique_ptr<Transport> make_cuda_transport(Backend&, bool) {
  fail(Exit::internal, "CUDA transport requested in a build without CUDA=1");
}

}  // namespace pt
