# Checkpoint/restart and the fault matrix (issue 6, docs/CHECKPOINT.md).
#   make test-faults   the checkpoint unit tests (np 1, 2, 4), tests/mpi/checkpoint_faults.sh
#                      (kills at every commit phase, corruption, disk full, I/O errors, NaN) and
#                      tests/mpi/checkpoint_resume.sh (golden resume, signals, re-slicing)
# `make test` runs the same scripts (tests/run_tests.sh runs every tests/mpi/*.sh); this target
# runs them alone, e.g. after a change to src/checkpoint or src/train/resume.cpp.
.PHONY: test-faults

test-faults: all $(BUILD)/pt_tests
	@for np in 1 2 4; do \
	  timeout --kill-after=10 300 $(MPIRUN) $(MPIFLAGS) -np $$np $(BUILD)/pt_tests --gtest_filter='*Checkpoint*' --gtest_brief=1 \
	    || exit 1; \
	done
	PT_BIN=$(BUILD)/pipetrain MPIRUN_FLAGS="$(MPIFLAGS)" timeout --kill-after=10 900 bash tests/mpi/checkpoint_faults.sh
	PT_BIN=$(BUILD)/pipetrain MPIRUN_FLAGS="$(MPIFLAGS)" timeout --kill-after=10 900 bash tests/mpi/checkpoint_resume.sh
