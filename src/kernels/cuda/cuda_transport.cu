// The transport for device buffers. Three ways a message can travel:
//  - CUDA-aware MPI (MPIX_Query_cuda_support() says so, or PT_MPI_CUDA_AWARE=1): device
//    pointers go to MPI_Isend/Irecv/Iallreduce once the compute stream has finished with them;
//  - otherwise staged: each device buffer gets a pinned host twin. A send copies device ->
//    pinned on the copy stream (after the compute stream's event) and posts MPI_Isend on the
//    twin; a receive posts MPI_Irecv into the twin, and finish_recv queues the pinned ->
//    device copy on the copy stream and makes the compute stream wait for it, so the upload
//    overlaps whatever compute is already queued and the host never waits for it;
//  - the replica allreduce through NCCL (PT_ALLREDUCE=nccl) on its own stream, when every
//    rank of the communicator has its own GPU (NCCL refuses two ranks on one device; those
//    fall back to MPI with a note).
// Contract (transport.hpp): a buffer handed to isend/irecv/iallreduce is not touched by
// the executor until its request completed (and finish_* ran); the executor posts a
// receive only into a buffer whose earlier readers have been queued already.
#include <mpi.h>
#include <nccl.h>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "pipetrain/transport.hpp"

#define PT_NCCL_CHECK(call)                                                                 \
  do {                                                                                      \
    const ncclResult_t pt_r_ = (call);                                                      \
    if (pt_r_ != ncclSuccess) ::pt::cuda::fail_call(#call, ncclGetErrorString(pt_r_), __FILE__, __LINE__); \
  } while (0)

namespace pt {
namespace cuda {
namespace {

// Whether MPI accepts device pointers, and how we know.
bool mpi_cuda_aware(std::string* how) {
  if (const char* v = std::getenv("PT_MPI_CUDA_AWARE"); v && *v) {
    const bool on = std::strcmp(v, "0") != 0;
    *how = std::string("PT_MPI_CUDA_AWARE=") + v;
    return on;
  }
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  const int rt = MPIX_Query_cuda_support();
  *how = "MPIX_Query_cuda_support() = " + std::to_string(rt);
  return rt == 1;
#else
  *how = "this MPI offers no CUDA-awareness query";
  return false;
#endif
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int count_of(size_t n) {
  PT_CHECK(n <= static_cast<size_t>(INT32_MAX), "message of " << n << " floats exceeds MPI's int count");
  return static_cast<int>(n);
}

class CudaTransport final : public Transport {
 public:
  CudaTransport(CudaBackend& be, bool nccl) : be_(be) {
    aware_ = mpi_cuda_aware(&aware_how_);
    want_nccl_ = nccl || env_is("PT_ALLREDUCE", "nccl");
    be_.make_current();
    PT_CU_CHECK(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming));
    if (want_nccl_) {
      PT_CU_CHECK(cudaStreamCreateWithFlags(&nccl_stream_, cudaStreamNonBlocking));
      PT_CU_CHECK(cudaEventCreateWithFlags(&nccl_done_, cudaEventDisableTiming));
    }
    static bool told = false;
    if (!told && world_rank() == 0) {
      std::printf("transport: %s\n", describe().c_str());
      std::fflush(stdout);
    }
    told = true;
  }

  ~CudaTransport() override {
    cudaStreamSynchronize(be_.copy_stream());
    if (nccl_stream_) cudaStreamSynchronize(nccl_stream_);
    for (auto& kv : nccl_)
      if (kv.second.comm) ncclCommDestroy(kv.second.comm);
    for (auto* m : {&send_, &recv_, &reduce_})
      for (auto& kv : *m) {
        if (kv.second.copied) cudaEventDestroy(kv.second.copied);
        if (kv.second.free) cudaEventDestroy(kv.second.free);
      }
    if (nccl_done_) cudaEventDestroy(nccl_done_);
    if (nccl_stream_) cudaStreamDestroy(nccl_stream_);
    if (mark_) cudaEventDestroy(mark_);
  }

  std::string describe() const override {
    std::string s = aware_ ? "CUDA-aware MPI, device pointers passed directly (" + aware_how_ + ")"
                           : "device buffers staged through pinned host memory on the copy stream (MPI is not CUDA-aware: " +
                                 aware_how_ + ")";
    if (want_nccl_) s += "; replica allreduce through NCCL " + std::to_string(NCCL_MAJOR) + "." +
                         std::to_string(NCCL_MINOR) + " where each replica has its own GPU";
    return s;
  }

  void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) override {
    const int count = count_of(n);
    if (aware_) {
      wait_compute();
      MPI_Isend(buf, count, MPI_FLOAT, peer, tag, comm, req->mpi());
      return;
    }
    Staging& s = staging(send_, buf);
    void* h = download(s, buf, n);
    MPI_Isend(h, count, MPI_FLOAT, peer, tag, comm, req->mpi());
  }

  void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm comm, Request* req) override {
    const int count = count_of(n);
    if (aware_) {
      wait_compute();  // queued kernels may still read the buffer MPI is about to fill
      MPI_Irecv(buf, count, MPI_FLOAT, peer, tag, comm, req->mpi());
      return;
    }
    Staging& s = staging(recv_, buf);
    if (s.copy_pending) PT_CU_CHECK(cudaEventSynchronize(s.copied));  // the twin's last upload is done
    s.copy_pending = false;
    void* h = s.host.reserve(n * sizeof(float));
    PT_CU_CHECK(cudaEventRecord(s.free, be_.compute_stream()));  // after every queued use of buf
    s.n = n;
    s.posted = true;
    MPI_Irecv(h, count, MPI_FLOAT, peer, tag, comm, req->mpi());
  }

  void finish_recv(float* buf) override {
    if (aware_) return;
    auto it = recv_.find(buf);
    PT_CHECK(it != recv_.end() && it->second.posted, "finish_recv on a buffer without a staged receive");
    upload(it->second, buf);
  }

  void iallreduce(float* buf, size_t n, MPI_Comm comm, Request* req) override {
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size == 1 || n == 0) {  // the sum over one rank is the buffer itself
      *req->mpi() = MPI_REQUEST_NULL;
      return;
    }
    const int count = count_of(n);
    if (want_nccl_ && nccl_for(comm)) {
      PT_CU_CHECK(cudaEventRecord(mark_, be_.compute_stream()));
      PT_CU_CHECK(cudaStreamWaitEvent(nccl_stream_, mark_, 0));
      PT_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nccl_[comm].comm, nccl_stream_));
      PT_CU_CHECK(cudaEventRecord(nccl_done_, nccl_stream_));
      nccl_pending_ = buf;
      *req->mpi() = MPI_REQUEST_NULL;  // completion is stream-ordered: finish_allreduce makes compute wait
      return;
    }
    if (aware_) {
      wait_compute();
      MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, comm, req->mpi());
      return;
    }
    Staging& s = staging(reduce_, buf);
    void* h = download(s, buf, n);
    PT_CU_CHECK(cudaEventRecord(s.free, be_.compute_stream()));
    s.n = n;
    s.posted = true;
    MPI_Iallreduce(MPI_IN_PLACE, h, count, MPI_FLOAT, MPI_SUM, comm, req->mpi());
  }

  void finish_allreduce(float* buf) override {
    if (nccl_pending_ == buf) {
      PT_CU_CHECK(cudaStreamWaitEvent(be_.compute_stream(), nccl_done_, 0));
      nccl_pending_ = nullptr;
      return;
    }
    if (aware_) return;
    auto it = reduce_.find(buf);
    if (it == reduce_.end() || !it->second.posted) return;  // single-rank communicator: nothing was sent
    upload(it->second, buf);
  }

 private:
  struct Staging {
    PinnedBuffer host;
    cudaEvent_t copied = nullptr;  // the last copy between host twin and device buffer
    cudaEvent_t free = nullptr;    // compute-stream point after which the device buffer may be written
    size_t n = 0;
    bool posted = false;        // an MPI receive/reduction into the twin awaits its upload
    bool copy_pending = false;  // an upload out of the twin may still be running
  };

  Staging& staging(std::map<const float*, Staging>& m, const float* key) {
    auto it = m.find(key);
    if (it != m.end()) return it->second;
    Staging& s = m[key];
    PT_CU_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    PT_CU_CHECK(cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming));
    return s;
  }

  // Host waits until the compute stream has finished everything queued so far.
  void wait_compute() {
    PT_CU_CHECK(cudaEventRecord(mark_, be_.compute_stream()));
    PT_CU_CHECK(cudaEventSynchronize(mark_));
  }

  // device -> pinned twin on the copy stream, after the compute stream produced the data;
  // the host waits for this copy only (MPI must find the bytes in place when the call returns).
  void* download(Staging& s, const float* buf, size_t n) {
    if (s.copy_pending) PT_CU_CHECK(cudaEventSynchronize(s.copied));
    void* h = s.host.reserve(n * sizeof(float));
    PT_CU_CHECK(cudaEventRecord(mark_, be_.compute_stream()));
    PT_CU_CHECK(cudaStreamWaitEvent(be_.copy_stream(), mark_, 0));
    PT_CU_CHECK(cudaMemcpyAsync(h, buf, n * sizeof(float), cudaMemcpyDeviceToHost, be_.copy_stream()));
    PT_CU_CHECK(cudaEventRecord(s.copied, be_.copy_stream()));
    PT_CU_CHECK(cudaEventSynchronize(s.copied));
    s.copy_pending = false;
    return h;
  }

  // pinned twin -> device on the copy stream once the buffer is free; compute waits for it.
  void upload(Staging& s, float* buf) {
    cudaStream_t copy = be_.copy_stream();
    PT_CU_CHECK(cudaStreamWaitEvent(copy, s.free, 0));
    PT_CU_CHECK(cudaMemcpyAsync(buf, s.host.data(), s.n * sizeof(float), cudaMemcpyHostToDevice, copy));
    PT_CU_CHECK(cudaEventRecord(s.copied, copy));
    PT_CU_CHECK(cudaStreamWaitEvent(be_.compute_stream(), s.copied, 0));
    s.posted = false;
    s.copy_pending = true;
  }

  // The NCCL communicator over an MPI communicator's ranks, built on first use (collective
  // over comm: every replica reaches its first allreduce). Null when ranks share a GPU.
  bool nccl_for(MPI_Comm comm) {
    auto it = nccl_.find(comm);
    if (it != nccl_.end()) return it->second.comm != nullptr;
    Nccl& nc = nccl_[comm];
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    cudaDeviceProp prop;
    PT_CU_CHECK(cudaGetDeviceProperties(&prop, be_.ordinal()));
    std::vector<char> uuids(static_cast<size_t>(size) * 16);
    MPI_Allgather(prop.uuid.bytes, 16, MPI_BYTE, uuids.data(), 16, MPI_BYTE, comm);
    bool shared = false;
    for (int a = 0; a < size && !shared; ++a)
      for (int b = a + 1; b < size && !shared; ++b)
        shared = std::memcmp(&uuids[static_cast<size_t>(a) * 16], &uuids[static_cast<size_t>(b) * 16], 16) == 0;
    if (shared) {
      if (rank == 0)
        std::fprintf(stderr, "pipetrain: PT_ALLREDUCE=nccl: replicas of a stage share a GPU, which NCCL does not "
                             "support; this allreduce uses MPI instead\n");
      return false;
    }
    ncclUniqueId id;
    if (rank == 0) PT_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm);
    PT_NCCL_CHECK(ncclCommInitRank(&nc.comm, size, id, rank));
    return true;
  }

  struct Nccl {
    ncclComm_t comm = nullptr;
  };

  CudaBackend& be_;
  bool aware_ = false, want_nccl_ = false;
  std::string aware_how_;
  cudaEvent_t mark_ = nullptr;
  std::map<const float*, Staging> send_, recv_, reduce_;
  std::map<MPI_Comm, Nccl> nccl_;
  cudaStream_t nccl_stream_ = nullptr;
  cudaEvent_t nccl_done_ = nullptr;
  const float* nccl_pending_ = nullptr;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Transport> make_cuda_transport(Backend& be, bool nccl_allreduce) {
  auto* cb = dynamic_cast<cuda::CudaBackend*>(&be);
  PT_CHECK(cb, "make_cuda_transport: backend " << be.describe() << " is not the CUDA backend");
  return std::make_unique<cuda::CudaTransport>(*cb, nccl_allreduce);
}

}  // namespace pt
