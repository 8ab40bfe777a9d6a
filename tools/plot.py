#!/usr/bin/env python3
"""Plots of pipetrain runs (PNG, Debian's python3-matplotlib).

  plot.py timeline RUN_DIR [--out PNG] [--window START_S END_S] [--last-steps N]
      one row per rank from RUN_DIR/trace.json: forwards and backwards coloured by
      microbatch (backwards hatched), communication thin, idle white
  plot.py accuracy RUN_DIR... [--out PNG] [--title T]
      test accuracy against training wall time, one line per run (metrics.jsonl)
  plot.py scaling CSV [--out PNG]
      speedup and parallel efficiency against ranks per schedule, from the CSV of
      bench/strong_scaling.sh (columns: schedule,ranks,kind,seconds_per_step,...);
      measured points solid, simulator predictions dashed
Each command prints the path it wrote.
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def timeline(args):
    with open(os.path.join(args.run, "trace.json")) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    if not events:
        sys.exit(f"{args.run}/trace.json has no events")
    summary = {}
    sp = os.path.join(args.run, "summary.json")
    if os.path.exists(sp):
        with open(sp) as f:
            summary = json.load(f)
    t0 = min(e["ts"] for e in events)
    lo, hi = 0.0, max(e["ts"] + e["dur"] for e in events) - t0
    if args.window:
        lo, hi = args.window[0] * 1e6, args.window[1] * 1e6
    elif args.last_steps:
        steps = sorted(e["ts"] - t0 for e in events if e["cat"] == "OPTIMIZER_STEP" and e["tid"] == 0)
        if len(steps) > args.last_steps:
            lo = steps[-args.last_steps - 1]
    ranks = sorted({e["tid"] for e in events})
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(14, 0.9 * len(ranks) + 1.8))
    for e in events:
        s, d = e["ts"] - t0, e["dur"]
        if s + d < lo or s > hi:
            continue
        y = ranks.index(e["tid"])
        cat, mb = e["cat"], e["args"].get("microbatch", 0)
        if cat in ("FORWARD", "BACKWARD"):
            ax.barh(y, d / 1e3, left=s / 1e3, height=0.8, color=cmap(mb % 20), edgecolor="black", linewidth=0.3,
                    hatch="///" if cat == "BACKWARD" else None)
            if d > (hi - lo) / 60:
                ax.text((s + d / 2) / 1e3, y, ("F" if cat == "FORWARD" else "B") + str(mb), ha="center", va="center",
                        fontsize=7)
        elif cat == "OPTIMIZER_STEP":
            ax.barh(y, max(d, (hi - lo) / 800) / 1e3, left=s / 1e3, height=0.8, color="black")
        else:  # communication: a thin bar under the row
            ax.barh(y + 0.45, max(d, (hi - lo) / 1500) / 1e3, left=s / 1e3, height=0.08, color="tab:gray")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([names.get(r, f"rank {r}") for r in ranks])
    ax.invert_yaxis()
    ax.set_xlim(lo / 1e3, hi / 1e3)
    ax.set_xlabel("time (ms)")
    title = f"{summary.get('schedule', '?')} on {summary.get('ranks', len(ranks))} ranks"
    if "bubble_fraction" in summary:
        title += f", measured bubble {summary['bubble_fraction']:.2f}"
    ax.set_title(title + " — forwards plain, backwards hatched, colour = microbatch; grey = messages, black = update")
    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", label="forward"),
                       Patch(facecolor="white", edgecolor="black", hatch="///", label="backward"),
                       Patch(facecolor="tab:gray", label="send/recv/allreduce"),
                       Patch(facecolor="black", label="update (incl. waiting for the allreduce)")], loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    out = args.out or os.path.join(args.run, "timeline.png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def accuracy(args):
    fig, ax = plt.subplots(figsize=(8, 5))
    for run in args.runs:
        pts = []
        with open(os.path.join(run, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if "test_accuracy" in r:
                    pts.append((r["elapsed_s"], r["test_accuracy"]))
        label = os.path.basename(os.path.normpath(run))
        sp = os.path.join(run, "summary.json")
        if os.path.exists(sp):
            with open(sp) as f:
                s = json.load(f)
            label = s.get("schedule", label) + ("" if s.get("valid_gradients", True) else " (invalid gradients)")
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
    if args.target:
        ax.axhline(args.target, color="gray", linestyle=":", label=f"target {args.target}")
    ax.set_xlabel("training wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(args.title or "test accuracy against wall time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = args.out or "accuracy.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def scaling(args):
    rows = list(csv.DictReader(open(args.csv)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    scheds = sorted({r["schedule"] for r in rows})
    markers = "osD^vP*X"
    effs = [float(r["efficiency"]) for r in rows]
    for i, sched in enumerate(scheds):
        color = plt.cm.tab10(i % 10)
        for kind, ls in (("measured", "-"), ("predicted", "--")):
            pts = sorted((int(r["ranks"]), float(r["speedup"]), float(r["efficiency"]))
                         for r in rows if r["schedule"] == sched and r["kind"] == kind)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            # markers shrink with the schedule's index so that coinciding lines stay visible
            style = dict(color=color, linestyle=ls, marker=markers[i % len(markers)], markersize=9 - 1.5 * i,
                         fillstyle="full" if kind == "measured" else "none", label=f"{sched} ({kind})")
            a1.plot(xs, [p[1] for p in pts], **style)
            a2.plot(xs, [p[2] for p in pts], **style)
    allr = sorted({int(r["ranks"]) for r in rows})
    a1.plot(allr, allr, ":", color="gray", label="ideal")
    a2.axhline(1.0, linestyle=":", color="gray")
    for a, name in ((a1, "speedup over 1 rank"), (a2, "parallel efficiency T1/(N TN)")):
        a.set_xscale("log", base=2)
        a.set_xlabel("ranks (solid: measured, dashed: simulator prediction)")
        a.set_ylabel(name)
        a.grid(alpha=0.3)
    a1.set_yscale("log", base=2)
    a2.set_ylim(0, max(1.1, max(effs) + 0.1))
    a1.legend(fontsize=7, loc="upper left")
    fig.suptitle(args.title or "strong scaling")
    fig.tight_layout()
    out = args.out or os.path.splitext(args.csv)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("timeline")
    t.add_argument("run")
    t.add_argument("--out")
    t.add_argument("--window", nargs=2, type=float)
    t.add_argument("--last-steps", type=int, default=0)
    a = sub.add_parser("accuracy")
    a.add_argument("runs", nargs="+")
    a.add_argument("--out")
    a.add_argument("--title")
    a.add_argument("--target", type=float)
    s = sub.add_parser("scaling")
    s.add_argument("csv")
    s.add_argument("--out")
    s.add_argument("--title")
    args = p.parse_args()
    {"timeline": timeline, "accuracy": accuracy, "scaling": scaling}[args.cmd](args)


if __name__ == "__main__":
    main()
