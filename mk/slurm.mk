# Slurm job scripts (issue 7; docs/JOBS.md).
#   make test-slurm   bring up a one-node Slurm on localhost (munged, slurmctld, slurmd under a
#                     temporary directory; installs slurm-wlm and munge as root when missing,
#                     skips with a message when it cannot) and run jobs/slurm/*.sbatch under it:
#                     tests/slurm/test_slurm.sh with PT_BIN=$(BUILD)/pipetrain
.PHONY: test-slurm

test-slurm: all
	PT_BIN=$(BUILD)/pipetrain timeout --kill-after=30 900 bash tests/slurm/test_slurm.sh
