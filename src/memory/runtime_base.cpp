// The runtime's base (memory_model.hpp, the `runtime` category): what the process holds
// before pipetrain allocates, measured. The libraries keep working memory they only bring in
// on first use (HDF5's free lists and caches when a checkpoint or weights.h5 is written,
// oneDNN's engine and generated kernels and OpenBLAS's buffers at the first product, MPI's
// shared-memory paths at the first message); a few small uses bring them in first, so that
// the measurement holds them and the model need not guess them.
#include <hdf5.h>
#include <mpi.h>

#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/memory_info.hpp"

namespace pt {
namespace {

// A chunked, checksummed dataset (as checkpoints and weights.h5 write) in an HDF5 file that
// lives in memory only (the core driver without a backing store): nothing touches the disk.
void touch_hdf5() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 20, 0);
  const hid_t f = H5Fcreate("pipetrain-warm-up.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (f >= 0) {
    const hsize_t n = 4096, chunk = 1024;
    std::vector<float> v(n, 1.0f);
    const hid_t space = H5Screate_simple(1, &n, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_fletcher32(dcpl);
    const hid_t ds = H5Dcreate2(f, "/warm", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds >= 0) {
      H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      H5Dclose(ds);
    }
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  H5Pclose(fapl);
}

// Small products through a host backend: oneDNN in each precision, and OpenBLAS (the rule of
// kernel_choice.cpp gives it short reductions).
void touch_kernels() {
  auto be = make_host_backend();
  const int64_t n = 64;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  for (Precision p : {Precision::fp32, Precision::bf16})
    be->gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, p);  // oneDNN
  be->gemm(false, false, n, n, 8, 1.0f, a.data(), 8, b.data(), n, 0.0f, c.data(), n, Precision::fp32);  // a short reduction: OpenBLAS
}

}  // namespace

void measure_runtime_base() {
  touch_hdf5();
  touch_kernels();
  int x = 1, y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  record_startup_resident();
}

}  // namespace pt
