// OpenBLAS kernel selection. Debian's OpenBLAS 0.3.21 misdetects some AVX-512 CPUs (as
// Prescott or Haswell) and then runs a kernel several times slower. The core type is read
// when the library loads, so the only fix from inside the program is to re-exec itself
// with OPENBLAS_CORETYPE set, before MPI_Init. blas_description() is the banner's kernel line
// (OpenBLAS's core and oneDNN's identity).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pipetrain/backend.hpp"
#include "pipetrain/commands.hpp"

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int);

namespace pt {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// 1 = SSE generation, 2 = AVX, 3 = AVX2/FMA, 4 = AVX-512
int core_level(const std::string& core) {
  const std::string c = lower(core);
  for (const char* k : {"skylakex", "cooperlake", "sapphirerapids"})
    if (c == k) return 4;
  for (const char* k : {"haswell", "zen", "skylake"})
    if (c == k) return 3;
  for (const char* k : {"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"})
    if (c == k) return 2;
  return 1;
}

std::string g_note;

}  // namespace

std::string select_blas_core(int argc, char** argv) {
  (void)argc;
  const std::string detected = openblas_get_corename();
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const char* want = avx512 ? "SkylakeX" : avx2 ? "Haswell" : nullptr;
  if (!std::getenv("OPENBLAS_NUM_THREADS") && !std::getenv("OMP_NUM_THREADS")) openblas_set_num_threads(1);
  if (const char* user = std::getenv("OPENBLAS_CORETYPE")) {
    if (const char* was = std::getenv("PIPETRAIN_BLAS_REEXEC"))
      g_note = std::string("OpenBLAS ") + detected + " (selected by pipetrain for this CPU; OpenBLAS detected " + was + ")";
    else {
      g_note = std::string("OpenBLAS ") + detected + " (OPENBLAS_CORETYPE=" + user + " from the environment)";
      if (want && core_level(detected) < core_level(want))
        g_note += std::string("; this CPU supports ") + want + ", which runs sgemm up to 2x faster";
    }
    return g_note;
  }
  if (want && core_level(detected) < core_level(want)) {
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("PIPETRAIN_BLAS_REEXEC", detected.c_str(), 1);
    execv("/proc/self/exe", argv);  // returns only on failure: carry on with the detected core
    unsetenv("OPENBLAS_CORETYPE");
  }
  g_note = std::string("OpenBLAS ") + detected + " (detected)";
  return g_note;
}

// The banner's kernel line: OpenBLAS's core, then oneDNN's version, effective ISA, the matmul
// implementation of a representative shape in each precision, and the fp32 kernel rule.
std::string blas_description() {
  const std::string blas = g_note.empty() ? std::string("OpenBLAS ") + openblas_get_corename() : g_note;
  return blas + "; " + onednn_description();
}

}  // namespace pt
