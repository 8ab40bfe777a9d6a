// Transport: how message buffers in backend memory reach MPI. Host memory (and device
// memory under a CUDA-aware MPI) goes to MPI directly; otherwise device buffers are
// staged through pinned host buffers. The executor sends, receives and reduces only
// through this interface.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "pipetrain/backend.hpp"

namespace pt {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string describe() const = 0;
  // Start sending n floats; `buf` stays untouched until *req completes.
  virtual void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request* req) = 0;
  // Start receiving n floats into `buf`; call finish_recv(buf) once *req completed.
  virtual void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm comm, MPI_Request* req) = 0;
  virtual void finish_recv(float* buf) { (void)buf; }
  // In-place sum of n floats over comm; call finish_allreduce(buf) once *req completed.
  virtual void iallreduce(float* buf, size_t n, MPI_Comm comm, MPI_Request* req) = 0;
  virtual void finish_allreduce(float* buf) { (void)buf; }
};

// Direct for host memory; for a CUDA backend: CUDA-aware when MPI reports it, else staged;
// with nccl_allreduce (parallel.allreduce = "nccl") replica reductions go through NCCL.
std::unique_ptr<Transport> make_transport(Backend& be, bool nccl_allreduce = false);
// Implemented by the CUDA backend (a stub throws in builds without CUDA=1).
std::unique_ptr<Transport> make_cuda_transport(Backend& be, bool nccl_allreduce);

}  // namespace pt
