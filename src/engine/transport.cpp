// The direct transport: backend pointers go straight to MPI (host memory).
#include "pipetrain/transport.hpp"

#include "pipetrain/error.hpp"

namespace pt {
namespace {

class DirectTransport final : public Transport {
 public:
  std::string describe() const override { return "direct (host memory)"; }
  void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request* req) override {
    PT_CHECK(n <= static_cast<size_t>(INT32_MAX), "message of " << n << " floats exceeds MPI's int count");
    MPI_Isend(buf, static_cast<int>(n), MPI_FLOAT, peer, tag, comm, req);
  }
  void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request* req) override {
    PT_CHECK(n <= static_cast<size_t>(INT32_MAX), "message of " << n << " floats exceeds MPI's int count");
    MPI_Irecv(buf, static_cast<int>(n), MPI_FLOAT, peer, tag, comm, req);
  }
  void iallreduce(float* buf, size_t n, MPI_Comm comm, MPI_Request* req) override {
    MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm, req);
  }
};

}  // namespace

std::unique_ptr<Transport> make_transport(Backend& be, bool nccl_allreduce) {
  if (be.device() == Device::cpu) return std::make_unique<DirectTransport>();
  return make_cuda_transport(be, nccl_allreduce);
}

}  // namespace pt
