// Transport: how message buffers in backend memory reach their peer, and the requests that
// track them. The MPI transports: host memory (and device memory under a CUDA-aware MPI)
// goes to MPI directly; otherwise device buffers are staged through pinned host buffers.
// The executor sends, receives, reduces, tests, waits for and cancels only through this
// interface (and ParallelContext for its place in the layout), so a test can hand it a
// transport that delivers between threads of one process (tests/unit/fake_transport.hpp).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pipetrain/backend.hpp"

namespace pt {

// A nonblocking operation a Transport started (a send, a receive, an allreduce): a handle
// that only that transport completes (test, cancel, wait). Null when nothing is in flight:
// a fresh handle, or one whose operation completed (the transport nulls it). The MPI
// transports keep their MPI_Request in it, another transport (a test's) a token of its own.
// Not copyable: one operation has one handle.
class Request {
 public:
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  Request(Request&& o) noexcept : mpi_(o.mpi_), token_(o.token_) { o.mpi_ = MPI_REQUEST_NULL, o.token_ = 0; }
  bool pending() const { return mpi_ != MPI_REQUEST_NULL || token_ != 0; }
  MPI_Request* mpi() { return &mpi_; }  // the MPI transports' handle
  uint64_t token() const { return token_; }
  void set_token(uint64_t t) { token_ = t; }  // other transports' handle; 0 = none

 private:
  MPI_Request mpi_ = MPI_REQUEST_NULL;
  uint64_t token_ = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string describe() const = 0;
  // Start sending n floats; `buf` stays untouched until *req completes.
  virtual void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) = 0;
  // Start receiving n floats into `buf`; call finish_recv(buf) once *req completed.
  virtual void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) = 0;
  virtual void finish_recv(float* buf) { (void)buf; }
  // In-place sum of n floats over comm; call finish_allreduce(buf) once *req completed.
  virtual void iallreduce(float* buf, size_t n, MPI_Comm comm, Request* req) = 0;
  virtual void finish_allreduce(float* buf) { (void)buf; }
  // The same as isend/irecv for host memory whatever the backend (tied gradients); MPI here.
  virtual void isend_host(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req);
  virtual void irecv_host(float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req);
  // In-place sum of n doubles in host memory over comm, whatever the backend (the per-tensor
  // sums of squares of the global gradient norm); MPI here.
  virtual void iallreduce_host(double* buf, size_t n, MPI_Comm comm, Request* req);
  // Whether *req completed (a null request has); a completed request becomes null. MPI_Test here.
  virtual bool test(Request* req);
  // Withdraw a receive that will never be matched, and wait until it is withdrawn
  // (MPI_Cancel and MPI_Wait here); the request becomes null.
  virtual void cancel(Request* req);
  // Wait for *req through test(); past timeout_s seconds without completion (run.comm_timeout_s)
  // throw Exit::timeout naming what(): the deadline and message of ParallelContext::wait.
  void wait(Request* req, double timeout_s, const std::function<std::string()>& what);
};

// Direct for host memory; for a CUDA backend: CUDA-aware when MPI reports it, else staged;
// with nccl_allreduce (parallel.allreduce = "nccl") replica reductions go through NCCL.
std::unique_ptr<Transport> make_transport(Backend& be, bool nccl_allreduce = false);
// Implemented by the CUDA backend (a stub throws in builds without CUDA=1).
std::unique_ptr<Transport> make_cuda_transport(Backend& be, bool nccl_allreduce);

}  // namespace pt
