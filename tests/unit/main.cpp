// GoogleTest main for pipetrain: initialises MPI and Kokkos once, runs the tests on every
// rank, and prints the full report from rank 0 only. Every other rank prints each of its
// failed assertions to stderr as "rank N: file:line: message" (and which test failed), so a
// failure on any rank is visible with its cause; the result is reduced over all ranks
// (MPI_Allreduce of the exit code), so any rank's failure fails the job. Tests that need a
// given rank count skip themselves otherwise (tests/run_tests.sh runs this binary at np 1,
// and the Mpi* suites at np 2, 3 and 4).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "pipetrain/commands.hpp"

namespace {

// Failures of ranks other than 0, one line (or block) per failed assertion, prefixed by rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::ostringstream os;
    const std::string where = r.file_name() ? std::string(r.file_name()) + ":" + std::to_string(r.line_number()) : "(unknown file)";
    os << "rank " << rank_ << ": " << where << ": " << (r.fatally_failed() ? "fatal failure" : "failure") << " in "
       << current_ << "\n";
    std::istringstream msg(r.message());
    for (std::string line; std::getline(msg, line);) os << "rank " << rank_ << ":   " << line << "\n";
    const std::string s = os.str();
    std::fwrite(s.data(), 1, s.size(), stderr);  // one write: lines of different ranks do not interleave
    std::fflush(stderr);
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    current_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed()) {
      std::fprintf(stderr, "rank %d: [  FAILED  ] %s\n", rank_, current_.c_str());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
  std::string current_;
};

}  // namespace

int main(int argc, char** argv) {
  pt::select_blas_core(argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  {
    Kokkos::InitArguments kargs;
    kargs.disable_warnings = true;
    Kokkos::ScopeGuard kokkos(kargs);
    ::testing::InitGoogleTest(&argc, argv);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(rank));
    }
    rc = RUN_ALL_TESTS();
    int any = rc;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && any != 0 && rc == 0)
      std::fprintf(stderr, "FAILED on another rank (see the \"rank N:\" lines above); rank 0 passed\n");
    if (size > 1) {  // one line per rank that failed, so the job's verdict is never "PASSED" alone
      int mine = rc != 0 ? 1 : 0;
      std::vector<int> all(static_cast<size_t>(size), 0);
      MPI_Gather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      if (rank == 0 && any != 0) {
        std::string who;
        for (int r = 0; r < size; ++r)
          if (all[static_cast<size_t>(r)]) who += (who.empty() ? "" : ", ") + std::to_string(r);
        std::fprintf(stderr, "MPI unit tests: failures on rank(s) %s of %d\n", who.c_str(), size);
      }
    }
    rc = any;
  }
  MPI_Finalize();
  return rc;
}
