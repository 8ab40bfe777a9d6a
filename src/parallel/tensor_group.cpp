// The tensor grid (parallel.tensor) by MPI_Comm_split, and its group's deterministic sum.
#include <mpi.h>

#include <algorithm>
#include <string>

#include "pipetrain/error.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/transport.hpp"

namespace pt {

TensorGrid split_tensor_grid(MPI_Comm world, int t) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  PT_CHECK(t >= 1 && size % t == 0, "split_tensor_grid: " << t << " does not divide " << size << " ranks");
  TensorGrid g;
  g.parts = t, g.rank = rank % t, g.group = rank / t;
  MPI_Comm_split(world, g.rank, g.group, &g.pipeline);
  if (t > 1) MPI_Comm_split(world, g.group, g.rank, &g.tensor);
  return g;
}

void free_tensor_grid(TensorGrid& g) {
  if (g.pipeline != MPI_COMM_NULL) MPI_Comm_free(&g.pipeline);
  if (g.tensor != MPI_COMM_NULL) MPI_Comm_free(&g.tensor);
}

void MpiTensorGroup::sum(Backend& be, float* x, int64_t count) const {
  const size_t n = static_cast<size_t>(count), t = static_cast<size_t>(grid_.parts);
  if (tr_) {  // device buffers: the transport's allreduce (NCCL or MPI)
    Request req;
    tr_->iallreduce(x, n, grid_.tensor, &req);
    wait_until([&] { return tr_->test(&req); }, ctx_.timeout(), [&] {
      return "the tensor group's allreduce of " + std::to_string(count) + " floats (tensor rank " + std::to_string(grid_.rank) + ")";
    });
    tr_->finish_allreduce(x);
    bytes_ += static_cast<int64_t>(n * (t - 1) * sizeof(float));
    return;
  }
  PT_CHECK(count <= (1LL << 31) / static_cast<int64_t>(t), "tensor sum of " << count << " floats exceeds one MPI message");
  all_.resize(n * t);
  out_.resize(n);
  be.to_host(all_.data() + n * static_cast<size_t>(grid_.rank), x, n);
  MPI_Request req;
  MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all_.data(), static_cast<int>(count), MPI_FLOAT, grid_.tensor, &req);
  ctx_.wait(&req, [&] {
    return "the tensor group's sum of " + std::to_string(count) + " floats (tensor rank " + std::to_string(grid_.rank) +
           " of " + std::to_string(grid_.parts) + ", group " + std::to_string(grid_.group) + ")";
  });
  std::copy(all_.begin(), all_.begin() + static_cast<std::ptrdiff_t>(n), out_.begin());
  for (size_t r = 1; r < t; ++r)
    for (size_t i = 0; i < n; ++i) out_[i] += all_[r * n + i];
  be.from_host(x, out_.data(), n);
  bytes_ += static_cast<int64_t>(n * (t - 1) * sizeof(float));
}

void MpiTensorGroup::sum_part(Backend& be, float* x, int64_t count, int64_t part) const {
  if (tr_) return sum(be, x, count);
  const size_t n = static_cast<size_t>(count), p = static_cast<size_t>(part), t = static_cast<size_t>(grid_.parts);
  PT_CHECK(n == p * t && part <= (1LL << 31) - 1, "tensor sum_part: " << count << " floats in parts of " << part);
  out_.resize(n);
  all_.resize(n);
  be.to_host(out_.data(), x, n);
  MPI_Request req;
  MPI_Ialltoall(out_.data(), static_cast<int>(part), MPI_FLOAT, all_.data(), static_cast<int>(part), MPI_FLOAT,
                grid_.tensor, &req);
  ctx_.wait(&req, [&] {
    return "the tensor group's reduce-scatter of " + std::to_string(count) + " floats (tensor rank " +
           std::to_string(grid_.rank) + " of " + std::to_string(grid_.parts) + ", group " + std::to_string(grid_.group) + ")";
  });
  for (size_t r = 1; r < t; ++r)  // the order sum() adds in
    for (size_t i = 0; i < p; ++i) all_[i] += all_[r * p + i];
  be.from_host(x + p * static_cast<size_t>(grid_.rank), all_.data(), p);
  bytes_ += static_cast<int64_t>(p * (t - 1) * sizeof(float));
}

void MpiTensorGroup::max(Backend& be, float* x, int64_t count) const {
  const size_t n = static_cast<size_t>(count);
  out_.resize(n);
  be.to_host(out_.data(), x, n);
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, out_.data(), static_cast<int>(count), MPI_FLOAT, MPI_MAX, grid_.tensor, &req);
  ctx_.wait(&req, [&] { return "the tensor group's maximum of " + std::to_string(count) + " floats"; });
  be.from_host(x, out_.data(), n);
  bytes_ += static_cast<int64_t>(n * static_cast<size_t>(grid_.parts - 1) * sizeof(float));
}

void MpiTensorGroup::gather(const double* mine, double* all, int64_t count) const {
  MPI_Request req;
  MPI_Iallgather(mine, static_cast<int>(count), MPI_DOUBLE, all, static_cast<int>(count), MPI_DOUBLE, grid_.tensor, &req);
  ctx_.wait(&req, [&] { return "the tensor group's gather of " + std::to_string(count) + " gradient-norm sums"; });
  bytes_ += count * static_cast<int64_t>((grid_.parts - 1) * sizeof(double));
}

void MpiTensorGroup::allgather(Backend& be, float* x, int64_t count, int64_t part) const {
  const size_t n = static_cast<size_t>(count);
  all_.resize(n);
  std::vector<int> counts(static_cast<size_t>(grid_.parts)), displs(counts.size());
  for (int k = 0; k < grid_.parts; ++k) {
    const int64_t a = std::min(count, k * part), b = std::min(count, a + part);
    displs[static_cast<size_t>(k)] = static_cast<int>(a), counts[static_cast<size_t>(k)] = static_cast<int>(b - a);
  }
  const size_t mine = static_cast<size_t>(grid_.rank);
  be.to_host(all_.data() + displs[mine], x + displs[mine], static_cast<size_t>(counts[mine]));
  MPI_Request req;
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all_.data(), counts.data(), displs.data(), MPI_FLOAT, grid_.tensor, &req);
  ctx_.wait(&req, [&] { return "the tensor group's gather of a pipeline message of " + std::to_string(count) + " floats"; });
  be.from_host(x, all_.data(), n);
  bytes_ += static_cast<int64_t>((n - static_cast<size_t>(counts[mine])) * sizeof(float));
}

}  // namespace pt
