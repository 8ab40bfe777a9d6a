// GoogleTest main for pipetrain: initialises MPI and Kokkos once, runs the tests on every
// rank, and prints results from rank 0 only. Tests that need a given rank count skip
// themselves otherwise (tests/run_tests.sh runs this binary at np 1, 2 and 4).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "pipetrain/commands.hpp"

int main(int argc, char** argv) {
  pt::select_blas_core(argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = 0;
  {
    Kokkos::InitArguments kargs;
    kargs.disable_warnings = true;
    Kokkos::ScopeGuard kokkos(kargs);
    ::testing::InitGoogleTest(&argc, argv);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    rc = RUN_ALL_TESTS();
    int any = rc;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rc = any;
  }
  MPI_Finalize();
  return rc;
}
