// Kokkos type aliases for the host backend: the execution space, range policy and the
// unmanaged View types that wrap backend pointers. Only src/kernels/host includes Kokkos.
#pragma once
#include <Kokkos_Core.hpp>

namespace pt::host {

using Exec = Kokkos::Serial;  // Debian's Kokkos 3.4 has only Serial: one rank per core
using Range = Kokkos::RangePolicy<Exec>;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
using Span = Kokkos::View<float*, Kokkos::HostSpace, Unmanaged>;
using ConstSpan = Kokkos::View<const float*, Kokkos::HostSpace, Unmanaged>;
using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
using ConstMatrix = Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;

}  // namespace pt::host
