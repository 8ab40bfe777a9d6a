// The direct transport: backend pointers go straight to MPI (host memory); and what every
// MPI transport shares: host-memory messages, tests, cancels and deadline waits on requests.
#include "pipetrain/transport.hpp"

#include "pipetrain/error.hpp"
#include "pipetrain/parallel.hpp"

namespace pt {
namespace {

int count_of(size_t n) {
  PT_CHECK(n <= static_cast<size_t>(INT32_MAX), "message of " << n << " floats exceeds MPI's int count");
  return static_cast<int>(n);
}

class DirectTransport final : public Transport {
 public:
  std::string describe() const override { return "direct (host memory)"; }
  void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) override {
    MPI_Isend(buf, count_of(n), MPI_FLOAT, peer, tag, comm, req->mpi());
  }
  void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) override {
    MPI_Irecv(buf, count_of(n), MPI_FLOAT, peer, tag, comm, req->mpi());
  }
  void iallreduce(float* buf, size_t n, MPI_Comm comm, Request* req) override {
    MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm, req->mpi());
  }
};

}  // namespace

void Transport::isend_host(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) {
  MPI_Isend(buf, count_of(n), MPI_FLOAT, peer, tag, comm, req->mpi());
}

void Transport::irecv_host(float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) {
  MPI_Irecv(buf, count_of(n), MPI_FLOAT, peer, tag, comm, req->mpi());
}

void Transport::iallreduce_host(double* buf, size_t n, MPI_Comm comm, Request* req) {
  MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(n), MPI_DOUBLE, MPI_SUM, comm, req->mpi());
}

bool Transport::test(Request* req) {
  if (*req->mpi() == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_Test(req->mpi(), &done, MPI_STATUS_IGNORE);
  return done != 0;
}

void Transport::cancel(Request* req) {
  if (*req->mpi() == MPI_REQUEST_NULL) return;
  MPI_Cancel(req->mpi());
  MPI_Wait(req->mpi(), MPI_STATUS_IGNORE);
}

void Transport::wait(Request* req, double timeout_s, const std::function<std::string()>& what) {
  if (!req->pending()) return;
  wait_until([&] { return test(req); }, timeout_s, what);
}

std::unique_ptr<Transport> make_transport(Backend& be, bool nccl_allreduce) {
  if (be.device() == Device::cpu) return std::make_unique<DirectTransport>();
  return make_cuda_transport(be, nccl_allreduce);
}

}  // namespace pt
