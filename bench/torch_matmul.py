#!/usr/bin/env python3
"""PyTorch's torch.matmul on one thread, for bench/kernels.sh's machine peak: GFLOP/s of
C[M,N] = A[M,K] B[K,N] in fp32 and bf16 (bf16 tensors, as torch runs them) for each SHAPE
(MxNxK), the median of REPS samples of at least MS milliseconds of this thread's CPU time
(the clock pt_bench_kernels uses). Prints one line per case: torch <prec> <shape> <median> <min> <max>.
Usage: torch_matmul.py [--reps N] [--ms M] SHAPE..."""
import argparse
import statistics
import time

import torch


def sample(f, ms):
    f()
    t0 = time.thread_time()
    f()
    inner = max(1, int(ms * 1e-3 / max(1e-7, time.thread_time() - t0)))
    t0 = time.thread_time()
    for _ in range(inner):
        f()
    return inner, time.thread_time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ms", type=float, default=20)
    ap.add_argument("shapes", nargs="+")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for shape in a.shapes:
        M, N, K = (int(v) for v in shape.split("x"))
        for prec, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            A = torch.randn(M, K).to(dtype)
            B = torch.randn(K, N).to(dtype)
            g = []
            for _ in range(a.reps):
                inner, t = sample(lambda: torch.matmul(A, B), a.ms)
                g.append(2.0 * M * N * K * inner / t * 1e-9)
            print(f"torch {prec} {shape} {statistics.median(g):.1f} {min(g):.1f} {max(g):.1f}", flush=True)


if __name__ == "__main__":
    main()
