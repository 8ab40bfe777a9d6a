#!/usr/bin/env python3
"""Compare the validation curves of a pipetrain run and the DDP baseline (bench/time_to_accuracy.sh tinygpt).

    bench/tta_report.py PIPETRAIN_RUN_DIR DDP.jsonl [--targets 3.0,2.5,2.0] [--plot FILE.png]

Reads the pipetrain run's metrics.jsonl (eval and epoch records: test_loss in nats, elapsed_s =
training time without evaluation) and summary.json when the run finished (layout, plan), and
the baseline's records (bench/ddp_baseline.py). Prints both curves, and for every target in
bits per byte (token) the training time and step at which each first evaluated at or below it.
"""
import argparse
import json
import math
import os

LN2 = math.log(2.0)


def pipetrain_curve(run_dir):
    evals, steps = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") in ("eval", "epoch") and "test_loss" in r:
                evals.append((r["step"], r["elapsed_s"], r["test_loss"] / LN2))
            elif r.get("type") == "step":
                steps.append(r)
    rate = [r["tokens_per_s"] for r in steps[1:] if "tokens_per_s" in r]
    return sorted(set(evals)), (sorted(rate)[len(rate) // 2] if rate else float("nan"))


def ddp_curve(path):
    evals, summary = [], {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "eval":
                evals.append((r["step"], r["train_time_s"], r["test_bits"]))
            elif r.get("type") == "summary":
                summary = r
    return evals, summary.get("tokens_per_s", float("nan"))


def first_at(curve, bits):
    return next(((s, t) for s, t, b in curve if b <= bits), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("ddp")
    ap.add_argument("--targets", default="3.0,2.5,2.0")
    ap.add_argument("--plot")
    a = ap.parse_args()
    pt, pt_rate = pipetrain_curve(a.run_dir)
    dd, dd_rate = ddp_curve(a.ddp)
    layout = ""
    spath = os.path.join(a.run_dir, "summary.json")
    if os.path.isfile(spath):
        with open(spath) as f:
            s = json.load(f)
        layout = f"{s.get('schedule')} split {s.get('split', '')} replicas {s.get('replicas')} M={s.get('microbatches')}"
    print(f"pipetrain ({layout or 'layout: see the run log'}): {pt_rate:.0f} tokens/s (median of logged intervals)")
    print(f"PyTorch DDP (gloo): {dd_rate:.0f} tokens/s (whole run)")
    print("\nvalidation bits per byte against training time (evaluation excluded):")
    print(f"{'':10}{'step':>7}{'train s':>10}{'bits':>8}")
    for name, c in (("pipetrain", pt), ("DDP", dd)):
        for s, t, b in c:
            print(f"{name:10}{s:7d}{t:10.1f}{b:8.3f}")
    print("\n| target (bits/byte) | pipetrain: step, seconds | PyTorch DDP: step, seconds | pipetrain faster by |")
    print("|---|---|---|---|")
    for bits in (float(x) for x in a.targets.split(",")):
        p, d = first_at(pt, bits), first_at(dd, bits)
        fmt = lambda h: f"{h[0]}, {h[1]:.0f} s" if h else "not reached"  # noqa: E731
        speed = f"{d[1] / p[1]:.2f}x" if p and d else "-"
        print(f"| {bits:.2f} | {fmt(p)} | {fmt(d)} | {speed} |")
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no plot: python3-matplotlib is not installed")
            return
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, c in (("pipetrain (2 ranks, planned)", pt), ("PyTorch DDP (2 processes, gloo)", dd)):
            if c:
                ax.plot([t for _, t, _ in c], [b for _, _, b in c], marker="o", label=name)
        ax.set_xlabel("training time, s (evaluation excluded)")
        ax.set_ylabel("validation bits per byte")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
