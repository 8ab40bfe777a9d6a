# Flakiness check (issue 12):
#   make test-repeat N=10   tests/run_tests.sh N times (default 10); the last N/2 runs with a
#                           `yes > /dev/null` process keeping one core busy (killed at the end,
#                           also on Ctrl-C); prints each run's result and every test's pass
#                           count, idle and loaded (tests/repeat_tests.sh; logs in
#                           $(BUILD)/test-repeat/). WHAT=unit|mpi narrows the runs; WHAT=more repeats make test-more.
N    ?= 10
WHAT ?= all
.PHONY: test-repeat

test-repeat:
	@bash tools/deps.sh quiet || bash tools/deps.sh install
	@$(SUBMAKE) all $(BUILD)/pt_tests
	@BUILD=$(BUILD) bash tests/repeat_tests.sh $(N) $(WHAT)
