// What the operating system says about memory: this process's resident bytes now and at
// their high-water mark (the kernel's VmHWM, what the OOM killer and a batch system's
// memory limit see), the bytes the node can still give (MemAvailable, capped by the
// cgroup's limit when one is set), and how many ranks of a communicator share this node.
// Read from /proc and /sys; -1 where the kernel does not say (not Linux).
#pragma once
#include <mpi.h>

#include <cstdint>

namespace pt {

int64_t resident_bytes();       // VmRSS of this process
int64_t peak_resident_bytes();  // VmHWM of this process: the most it has held resident
// MemAvailable of /proc/meminfo, or the cgroup (v2 memory.max, v1 limit_in_bytes) limit
// less the cgroup's current usage when that is smaller.
int64_t node_available_bytes();
// Ranks of `comm` on this node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED). Collective on comm.
int ranks_on_node(MPI_Comm comm);
// The runtime's own bytes: record_startup_resident() (main, once MPI and Kokkos are up and
// before pipetrain allocates) keeps resident_bytes(); startup_resident_bytes() returns it (or
// resident_bytes() now when nothing was recorded, as in a test).
void record_startup_resident();
int64_t startup_resident_bytes();
// main: bring in the libraries' first-use working memory with a few small uses (an HDF5 file
// in memory, small products through the host backend, an allreduce), then
// record_startup_resident() (src/memory/runtime_base.cpp). Collective on MPI_COMM_WORLD.
void measure_runtime_base();
// PT_MEMORY_TRACE=1 in the environment: print this process's resident and peak bytes with `where`
// (to stderr, one line), for finding what a memory estimate misses. Nothing otherwise.
void memory_trace(const char* where);

}  // namespace pt
