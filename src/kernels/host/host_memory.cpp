// Host backend, its memory: buffers (2 MiB ones on huge pages), copies, labels, the backend's
// scratch, and the bf16 storage conversions (pack_bf16, unpack_bf16, round_bf16 and both at
// once). The products are routed in host_gemm.cpp; the elementwise, loss, reduction and
// optimizer kernels are in host_backend.cpp.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/views.hpp"
#include "vec_math.hpp"

extern "C" char* openblas_get_corename(void);

namespace pt {

std::unique_ptr<Backend> make_host_backend() { return std::make_unique<host::HostBackend>(); }

namespace host {

namespace {

// PT_HUGE_PAGES is not "0" (alloc asks for huge pages), and the kernel may give them.
bool huge_pages_asked() {
  const char* huge = std::getenv("PT_HUGE_PAGES");
  return !(huge && std::string(huge) == "0");
}

bool huge_pages_given() {
  static const bool given = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(in, line) && line.find("[never]") == std::string::npos;
  }();
  return given;
}

constexpr size_t kHugePageBytes = size_t{2} << 20;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

}  // namespace host

int64_t host_resident_bytes(int64_t bytes, bool huge_pages) {
  const size_t b = static_cast<size_t>(std::max<int64_t>(0, bytes));
  if (huge_pages && b >= host::kHugePageBytes && host::huge_pages_asked() && host::huge_pages_given())
    return static_cast<int64_t>(host::round_up(b, host::kHugePageBytes));
  if (b >= (size_t{128} << 10)) return static_cast<int64_t>(host::round_up(b, size_t{4} << 10));
  return static_cast<int64_t>(b);
}

namespace host {

HostBackend::HostBackend() {
  PT_CHECK(Kokkos::is_initialized(), "Kokkos must be initialised before the host backend");
  huge_pages_ = huge_pages_asked();
  onednn_threads_default();
}

HostFused::HostFused(HostBackend& hb) : FusedKernels(hb), hb_(hb) {
  const char* env = std::getenv("PT_FUSED_ATTENTION");
  attention_ = !(env && std::string(env) == "0");
}

std::string HostBackend::describe() const {
  return std::string("cpu (Kokkos ") + std::to_string(KOKKOS_VERSION / 10000) + "." +
         std::to_string(KOKKOS_VERSION / 100 % 100) + " Serial, OpenBLAS " + openblas_get_corename() + ", oneDNN " +
         onednn_version() + ")";
}

// Buffers of 2 MiB and more sit on 2 MiB pages where the kernel allows it (transparent huge
// pages, often "madvise" only): a token-major activation is read a head's columns at a time,
// one row per 4 KiB page otherwise, and the TLB misses showed in the attention kernel.
// PT_HUGE_PAGES=0 in the environment turns this off (docs/JOBS.md, "Memory pages").
float* HostBackend::alloc(size_t n) {
  const size_t bytes = n * sizeof(float);
  float* p = nullptr;
  if (huge_pages_ && bytes >= kHugePage) {
    const size_t span = round_up(bytes, kHugePage);
    void* v = nullptr;
    PT_CHECK(posix_memalign(&v, kHugePage, span) == 0, "host backend: cannot allocate " << span << " bytes");
    madvise(v, span, MADV_HUGEPAGE);  // advice only: without huge pages the buffer works the same
    p = static_cast<float*>(v);
    huge_.insert(p);
  } else {
    p = static_cast<float*>(Kokkos::kokkos_malloc<Kokkos::HostSpace>("pt::buffer", bytes));
  }
  std::memset(p, 0, bytes);
  bytes_[p] = bytes;
  return p;
}
// What oneDNN kept from the buffer (weights in its layout) goes with it.
void HostBackend::release(float* p) {
  if (!p) return;
  auto it = bytes_.find(p);
  if (it != bytes_.end()) {
    if (dnn_) dnn_->forget_weights(p, reinterpret_cast<const unsigned char*>(p) + it->second);
    bytes_.erase(it);
  }
  if (huge_.erase(p)) return std::free(p);
  Kokkos::kokkos_free<Kokkos::HostSpace>(p);
}
void HostBackend::copy(float* dst, const float* src, size_t n) {
  if (dst != src) std::memcpy(dst, src, n * sizeof(float));
}
void HostBackend::to_host(float* host, const float* src, size_t n) { copy(host, src, n); }
void HostBackend::from_host(float* dst, const float* host, size_t n) { copy(dst, host, n); }
void HostBackend::fill(float* x, float v, size_t n) {
  Kokkos::parallel_for("pt::fill", Range(0, n), [=](size_t i) { x[i] = v; });
}

int32_t* HostBackend::alloc_int(size_t n) {
  auto* p = static_cast<int32_t*>(Kokkos::kokkos_malloc<Kokkos::HostSpace>("pt::labels", n * sizeof(int32_t)));
  std::memset(p, 0, n * sizeof(int32_t));
  return p;
}
void HostBackend::release_int(int32_t* p) { Kokkos::kokkos_free<Kokkos::HostSpace>(p); }
void HostBackend::labels_from_host(int32_t* dst, const int32_t* host, size_t n) {
  if (dst != host) std::memcpy(dst, host, n * sizeof(int32_t));
}

float* HostBackend::workspace(size_t n) {
  if (ws_.size() < n) ws_.resize(n);
  return ws_.data();
}

// In place or not (vec_math.hpp's pack_bf16_span).
void HostBackend::pack_bf16(size_t n, const float* x, float* packed) {
  pack_bf16_span(n, x, packed);
  if (n % 2) std::memset(reinterpret_cast<unsigned char*>(packed) + 2 * n, 0, 2);  // the last word's upper half
}

// In place (packed == x) or not. Backwards from the last element: float i takes bytes
// [4i, 4i + 4), the halves of elements 2i and 2i + 1, which are read before (2i > i, or i = 0
// and element 0 is read just before); byte copies, as the two views alias.
void HostBackend::unpack_bf16(size_t n, const float* packed, float* x) {
  const auto* in = reinterpret_cast<const unsigned char*>(packed);
  auto* out = reinterpret_cast<unsigned char*>(x);
  for (size_t i = n; i-- > 0;) {
    uint16_t b;
    std::memcpy(&b, in + 2 * i, 2);
    const float f = bf16_to_float(b);
    std::memcpy(out + 4 * i, &f, 4);
  }
}

void HostBackend::round_bf16(size_t n, const float* x, float* y) {
  bf16_span<true, false>(n, x, y, nullptr);
}

void HostBackend::round_pack_bf16(size_t n, const float* x, float* y, float* packed) {
  bf16_span<true, true>(n, x, y, packed);
  if (n % 2) std::memset(reinterpret_cast<unsigned char*>(packed) + 2 * n, 0, 2);  // as pack_bf16
}

}  // namespace host
}  // namespace pt
