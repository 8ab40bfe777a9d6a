// Memory as the operating system reports it (memory_info.hpp): /proc/self/status for this
// process, /proc/meminfo and the cgroup files for the node.
#include "pipetrain/memory_info.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace pt {
namespace {

// The value of a "Key:   123 kB" line of a /proc file, in bytes; -1 when absent.
int64_t proc_kb_field(const char* path, const char* key) {
  std::ifstream in(path);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      long long kb = -1;
      if (std::sscanf(line.c_str() + n + 1, "%lld", &kb) == 1) return static_cast<int64_t>(kb) * 1024;
    }
  return -1;
}

// A number in a one-line cgroup file ("max" or absent: -1).
int64_t file_number(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return -1;
  try {
    return static_cast<int64_t>(std::stoll(s));
  } catch (...) {
    return -1;
  }
}

}  // namespace

int64_t resident_bytes() { return proc_kb_field("/proc/self/status", "VmRSS"); }
int64_t peak_resident_bytes() { return proc_kb_field("/proc/self/status", "VmHWM"); }

int64_t node_available_bytes() {
  int64_t avail = proc_kb_field("/proc/meminfo", "MemAvailable");
  struct { const char *limit, *usage; } groups[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (auto& g : groups) {
    const int64_t limit = file_number(g.limit), usage = file_number(g.usage);
    // v1 reports "no limit" as a huge page-rounded number
    if (limit <= 0 || usage < 0 || limit >= (int64_t{1} << 60)) continue;
    const int64_t left = limit > usage ? limit - usage : 0;
    if (avail < 0 || left < avail) avail = left;
  }
  return avail;
}

int ranks_on_node(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

namespace {
int64_t g_startup_resident = -1;
}

void record_startup_resident() { g_startup_resident = resident_bytes(); }
int64_t startup_resident_bytes() { return g_startup_resident >= 0 ? g_startup_resident : resident_bytes(); }

void memory_trace(const char* where) {
  static const bool on = [] {
    const char* v = std::getenv("PT_MEMORY_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  if (!on) return;
  int rank = 0, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "memory rank %d %-28s resident %9.1f MB  peak %9.1f MB\n", rank, where, resident_bytes() / 1e6,
               peak_resident_bytes() / 1e6);
}

}  // namespace pt
