# Activation recomputation (issue 23, parallel.recompute; docs/ARCHITECTURE.md "Recomputation").
#   make test-recompute   the recomputation unit tests (np 1), then tests/mpi/recompute.sh with
#                         RECOMPUTE_MATRIX=1: every schedule family (1f1b, zb-h1,
#                         interleaved-1f1b, pipedream, 2bw) on tinygpt and the ResNet at 2 and 4
#                         ranks, full and selective against none bitwise, and a checkpoint/resume
#                         per schedule (about 10 minutes on 2 cores)
# `make test` runs the script's subset (tests/run_tests.sh runs every tests/mpi/*.sh).
# The benchmark (step time and activation memory on gpt2_small) is bench/recompute.sh.
.PHONY: test-recompute

test-recompute: all $(BUILD)/pt_tests
	timeout --kill-after=10 300 $(MPIRUN) $(MPIFLAGS) -np 1 $(BUILD)/pt_tests --gtest_filter='Recompute*:StagePools*:Simulator.Recompute*' \
	  --gtest_brief=1
	RECOMPUTE_MATRIX=1 PT_BIN=$(BUILD)/pipetrain MPIRUN_FLAGS="$(MPIFLAGS)" timeout --kill-after=10 1800 bash tests/mpi/recompute.sh
