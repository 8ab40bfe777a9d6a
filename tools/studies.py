#!/usr/bin/env python3
"""Experiment drivers behind bench/strong_scaling.sh and bench/time_to_accuracy.sh.

Standard library only (plots go through tools/plot.py when matplotlib is installed).

  studies.py scaling  [--deck D] [--ranks 1,2] [--predict 4,8,...] [--schedules ...] [--reps 3] [--steps 40]
  studies.py accuracy [--deck D] [--ranks 2] [--schedules ...] [--epochs 3] [--eval-every N] [--target T]
  studies.py ablation [--deck D] [--measure 2] [--predict 2,4,8,16] [--reps 3]
  studies.py predict  [--deck D] [--ranks 2] [--schedules ...] [--reps 3] [--tolerance 0.10] [--set K=V ...]

scaling: measured points run each configuration REPS times and time only steady-state steps
(the first logged interval is dropped; startup, profiling, evaluation and I/O are outside the
step timings); predicted points come from the simulator (`pipetrain plan`) on a profile taken
on this machine, and are labelled predicted. Writes a CSV, a markdown table and a PNG.
accuracy: trains every schedule on the same deck and ranks, and reports epochs and seconds to
the target accuracy, the final accuracy and samples/s; plots accuracy against wall time.
predict: in each of REPS rounds, profiles the deck on this machine, then for every schedule
predicts the time per minibatch from that profile (`pipetrain simulate`) and measures the
steady-state time of one run of the same layout; the error per schedule is the median over the
rounds of predicted/measured - 1, with its range, PASS or FAIL against --tolerance (10%), and the
median over schedules against --median-tolerance (5%). Interleaving profiles with runs keeps a
drifting host from faking a fit.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PT = os.environ.get("PT_BIN", os.path.join(ROOT, "build", "pipetrain"))
MPIRUN = os.environ.get("MPIRUN", "mpirun")
FLAGS = os.environ.get("MPIRUN_FLAGS", ("--allow-run-as-root " if os.geteuid() == 0 else "") + "--oversubscribe").split()


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n  see {log}")


def train(np_, deck, sets, out, name):
    cmd = [MPIRUN, *FLAGS, "-np", str(np_), PT, "train", deck, "--set", f"run.output_dir={out}",
           "--set", f"run.name={name}", "--set", "checkpoint.at_end=false", "--set", "run.plots=false"]
    for s in sets:
        cmd += ["--set", s]
    run(cmd, os.path.join(out, name + ".log"))
    return os.path.join(out, name)


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def steady_seconds_per_step(run_dir, batch):
    """Median seconds per step over the logged intervals, the first (warm-up) dropped."""
    rates = [m["samples_per_s"] for m in metrics(run_dir) if m.get("type") == "step"][1:]
    if not rates:
        sys.exit(f"{run_dir}: too few logged steps for a steady-state timing (raise --steps)")
    return batch / statistics.median(rates)


def plan(deck, ranks, profile, schedule, out, extra=()):
    path = os.path.join(out, f"plan_{schedule}_{ranks}.json")
    cmd = [PT, "plan", deck, "--ranks", str(ranks), "--profile", profile, "--out", path, *extra]
    if schedule not in ("bsp", "all"):
        cmd += ["--schedules", schedule]
    run(cmd, path + ".log")
    with open(path) as f:
        return json.load(f)


# one process, the whole model, one microbatch: the baseline of every speedup
ONE_RANK = ["parallel.split=[]", "parallel.replicas=[1]", "parallel.schedule=1f1b", "parallel.microbatches=1"]


def bsp_sets(ranks, microbatches=None):
    """Data parallelism: one stage, every rank a replica, one microbatch per replica by default."""
    return ["parallel.schedule=bsp", "parallel.split=[]", f"parallel.replicas=[{ranks}]",
            f"parallel.microbatches={microbatches or ranks}"]


def steady_sets(a):
    """The training keys of a steady-state timing run (studies' --steps, --log-every, --batch)."""
    return [f"train.max_steps={a.steps}", f"train.log_every={a.log_every}", f"train.batch_size={a.batch}",
            "train.eval_batch_size=500"]


def profile(deck, ranks, out, what, extra=(), name="profile", microbatch=0):
    """pipetrain profile under mpirun (layers on rank 0, the network between the ranks); at
    `microbatch` samples per unit when given, else the deck's unit."""
    prof = os.path.join(out, name + ".json")
    print(f"profiling {deck} ({what}) ...", flush=True)
    cmd = [MPIRUN, *FLAGS, "-np", str(ranks), PT, "profile", deck, "--out", prof]
    if microbatch:
        cmd += ["--microbatch", str(microbatch)]
    for x in list(extra) + ["parallel.split=[]"]:
        cmd += ["--set", x]
    run(cmd, prof + ".log")
    return prof


def layout_sets(p, schedule):
    if schedule == "bsp":
        return bsp_sets(p["ranks"], p["baselines"]["bsp"].get("microbatches"))
    return [f"parallel.schedule={p['schedule']}", f"parallel.split={json.dumps(p['split'])}",
            f"parallel.replicas={json.dumps(p['replicas'])}", f"parallel.microbatches={p['microbatches']}"]


def predicted(p, schedule):
    c = p["baselines"]["bsp"] if schedule == "bsp" else p
    pr = c.get("predicted", c)
    return {"time_per_sample": pr["time_per_sample_s"], "bubble": pr.get("bubble_fraction", 0.0),
            "bytes": pr.get("network_bytes_per_sample", 0.0), "layout": c.get("replication", "")}


def simulate(deck, ranks, profile, sets, out, name):
    """The simulator's prediction for an explicit configuration: seconds per minibatch, bubble, bytes."""
    log = os.path.join(out, name + ".sim.txt")
    cmd = [PT, "simulate", deck, "--ranks", str(ranks), "--profile", profile]
    for x in sets:
        cmd += ["--set", x]
    run(cmd, log)
    text = open(log).read()
    import re
    mb = float(re.search(r"predicted time per minibatch ([0-9.e+-]+) ms", text).group(1)) / 1e3
    bubble = float(re.search(r"bubble ([0-9.e+-]+)", text).group(1))
    net = re.search(r"on the network \(ring\) ([0-9.e+-]+) (k?B)", text)
    bytes_ = float(net.group(1)) * (1000 if net.group(2) == "kB" else 1)
    return mb, bubble, bytes_


def describe(sets):
    """'split [3], replicas [1, 1], 1f1b, M=4' from --set strings."""
    kv = dict(x.split("=", 1) for x in sets)
    return (f"split {kv.get('parallel.split', '[]')}, replicas {kv.get('parallel.replicas', '?')}, "
            f"{kv.get('parallel.schedule', '?')}, M={kv.get('parallel.microbatches', '1')}")


ABLATION = ["model-parallel", "straight pipeline", "full plan", "bsp"]


def ablation(a):
    """Model parallelism vs straight pipeline vs the full plan vs data parallelism, same ranks."""
    os.makedirs(a.out, exist_ok=True)
    prof = profile(a.deck, 2, a.out, "layers on rank 0, network between 2 ranks")
    batch, M = a.batch, a.microbatches
    base = steady_sets(a)

    def configs(n):
        full = plan(a.deck, n, prof, "all", a.out)
        straight = full["baselines"].get("straight")
        if straight is None:  # more ranks than the chain has places to cut: no straight pipeline exists
            return full, {"full plan": layout_sets(full, full["schedule"]), "bsp": layout_sets(full, "bsp")}
        split = json.dumps(straight["split"])
        ones = json.dumps([1] * (len(straight["split"]) + 1))
        return full, {
            "model-parallel": [f"parallel.split={split}", f"parallel.replicas={ones}", "parallel.schedule=model-parallel",
                               f"parallel.microbatches={M}"],
            "straight pipeline": [f"parallel.split={split}", f"parallel.replicas={ones}", "parallel.schedule=1f1b",
                                  f"parallel.microbatches={M}"],
            "full plan": layout_sets(full, full["schedule"]),
            "bsp": layout_sets(full, "bsp"),
        }

    rows = []
    # measured points, repetitions interleaved across points (a slow period hits all of them)
    points = [("one rank", 1, ONE_RANK)]
    for n in a.measure:
        cfg = configs(n)[1]
        points += [(name, n, cfg[name]) for name in ABLATION if name in cfg]
    times = {(name, n): [] for name, n, _ in points}
    for r in range(a.reps):
        for name, n, sets in points:
            d = train(n, a.deck, base + sets, a.out, f"abl_{name.replace(' ', '_')}_{n}_r{r}")
            times[(name, n)].append(steady_seconds_per_step(d, batch))
    t1 = statistics.median(times[("one rank", 1)])
    p1, _, _ = simulate(a.deck, 1, prof, ONE_RANK, a.out, "abl_1")
    for name, n, sets in points[1:]:
        ts = times[(name, n)]
        rows.append({"config": name, "ranks": n, "kind": "measured", "speedup": t1 / statistics.median(ts),
                     "range": f"{t1 / max(ts):.2f}-{t1 / min(ts):.2f}", "layout": describe(sets)})
        print(f"  measured {name:18s} {n} ranks: {rows[-1]['speedup']:.2f}x ({rows[-1]['range']})", flush=True)
    for n in a.predict:
        _, cfg = configs(n)
        for name in ABLATION:
            if name not in cfg:
                rows.append({"config": name, "ranks": n, "kind": "predicted", "speedup": None, "range": "",
                             "layout": f"not possible: a {n}-stage straight pipeline needs {n} layers to cut into"})
                continue
            sec, bubble, _ = simulate(a.deck, n, prof, cfg[name], a.out, f"abl_{name.replace(' ', '_')}_{n}")
            rows.append({"config": name, "ranks": n, "kind": "predicted", "speedup": p1 / sec, "range": "",
                         "layout": describe(cfg[name])})
    lines = ["| configuration | ranks | kind | speedup over 1 rank | layout (split, replicas, schedule) |", "|---|---|---|---|---|"]
    for r in rows:
        rng = f" ({r['range']})" if r["range"] else ""
        speedup = f"{r['speedup']:.2f}x{rng}" if r["speedup"] is not None else "-"
        lines.append(f"| {r['config']} | {r['ranks']} | {r['kind']} | {speedup} | {r['layout']} |")
    table = "\n".join(lines)
    with open(os.path.join(a.out, "ablation.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print("paper (VGG-16 on 4 GPUs): straight pipeline 2.56x, full PipeDream 3.14x over one GPU; model parallelism below 1x")


def predict_sets(a, s):
    """The --set strings of schedule s in the predict study (its layout, microbatches, extras)."""
    if s == "bsp":
        return bsp_sets(a.ranks) + a.extra
    stages = len(json.loads(a.split)) + 1
    m = 1 if s.startswith("pipedream") else max(a.microbatches, stages if s == "2bw" else 1)
    return [f"parallel.schedule={s}", f"parallel.split={a.split}", f"parallel.replicas={json.dumps([1] * stages)}",
            f"parallel.microbatches={m}"] + a.extra


def predict_round(a, r, base):
    """One round: a fresh profile, then every schedule predicted from it and run once. A round
    pairs each prediction with a run minutes apart, so a host that drifts between rounds moves
    both; the study's error per schedule is the median over the rounds of predicted/measured."""
    # the profile and the simulator see the runs' batch (--batch), and each schedule is
    # predicted from a profile taken at its own microbatch (batch / M): per-sample costs are
    # not linear in the microbatch (caches), so a profile at 128 samples over-charged the CNN's
    # runs at 32 by up to 19% on an AMX Xeon (bench/README.md)
    batch = [f"train.batch_size={a.batch}"]
    profs = {}
    out = {}
    for s in a.schedules:
        sets = predict_sets(a, s)
        unit = a.batch // int(dict(x.split("=", 1) for x in sets).get("parallel.microbatches", "1"))
        if unit not in profs:
            profs[unit] = profile(a.deck, a.ranks, a.out,
                                  f"round {r + 1}, microbatch {unit}: layers on rank 0, network between {a.ranks} ranks",
                                  extra=batch + a.extra, name=f"profile_r{r}_mb{unit}", microbatch=unit)
        prof = profs[unit]
        pred, bubble, _ = simulate(a.deck, a.ranks, prof, batch + sets, a.out, f"pvm_{s}_r{r}")
        meas = steady_seconds_per_step(train(a.ranks, a.deck, base + sets, a.out, f"pvm_{s}_r{r}"), a.batch)
        out[s] = (pred, meas, bubble)
        print(f"  round {r + 1} {s:18s} predicted {pred * 1e3:9.2f} ms  measured {meas * 1e3:9.2f} ms  "
              f"error {(pred / meas - 1) * 100:+6.1f}%", flush=True)
    return out


def predict(a):
    """The simulator against the measured run: every schedule, same deck, same ranks, profiles
    and runs interleaved round by round (predict_round)."""
    os.makedirs(a.out, exist_ok=True)
    base = steady_sets(a)
    rounds = [predict_round(a, r, base) for r in range(a.reps)]
    rows = []
    for s in a.schedules:
        pred = [rd[s][0] for rd in rounds]
        meas = [rd[s][1] for rd in rounds]
        errs = [p / m - 1 for p, m in zip(pred, meas)]
        err = statistics.median(errs)
        rows.append({"schedule": s, "layout": describe(predict_sets(a, s)), "predicted_ms": statistics.median(pred) * 1e3,
                     "measured_ms": statistics.median(meas) * 1e3, "measured_min_ms": min(meas) * 1e3,
                     "measured_max_ms": max(meas) * 1e3, "error": err, "error_min": min(errs), "error_max": max(errs),
                     "predicted_bubble": statistics.median(rd[s][2] for rd in rounds),
                     "verdict": "PASS" if abs(err) <= a.tolerance else "FAIL"})
    with open(os.path.join(a.out, "predicted_vs_measured.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    lines = [f"| schedule | layout | predicted ms/minibatch | measured ms/minibatch (min-max of {a.reps}) | "
             f"error (median of rounds, range) | within {a.tolerance * 100:.0f}% |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['schedule']} | {r['layout']} | {r['predicted_ms']:.2f} | {r['measured_ms']:.2f} "
              f"({r['measured_min_ms']:.2f}-{r['measured_max_ms']:.2f}) | {r['error'] * 100:+.1f}% "
              f"({r['error_min'] * 100:+.1f} to {r['error_max'] * 100:+.1f}) | {r['verdict']} |" for r in rows]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "predicted_vs_measured.md"), "w") as f:
        f.write(table + "\n")
    print(f"deck {a.deck}, {a.ranks} ranks, extra sets {a.extra or 'none'}, CPU {cpu_model()}")
    print(table)
    errs = sorted(abs(r["error"]) for r in rows)
    med_ok = statistics.median(errs) <= a.median_tolerance
    print(f"|error| median {statistics.median(errs) * 100:.1f}% (goal <= {a.median_tolerance * 100:.0f}%: "
          f"{'PASS' if med_ok else 'FAIL'}), max {errs[-1] * 100:.1f}% over {len(rows)} schedules; "
          f"{sum(r['verdict'] == 'PASS' for r in rows)}/{len(rows)} within {a.tolerance * 100:.0f}%")
    print(f"wrote {a.out}/predicted_vs_measured.csv and .md")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def scaling(a):
    os.makedirs(a.out, exist_ok=True)
    prof = profile(a.deck, 2, a.out, "layers on rank 0, network between 2 ranks")
    batch = a.batch
    base = steady_sets(a)
    rows = []
    # measured: the repetitions are interleaved (rep 1 of every point, then rep 2, ...) so that a
    # slow or fast period of this shared machine lands on every point, not on one
    points = []
    for n in a.ranks:
        for s in (["1f1b"] if n == 1 else a.schedules):
            p = plan(a.deck, n, prof, s, a.out)
            sets = ONE_RANK if n == 1 else layout_sets(p, s)
            label = "1 stage" if n == 1 else (p["baselines"]["bsp"].get("replication", "") if s == "bsp" else p["replication"])
            points.append({"n": n, "s": s, "sets": sets, "label": label, "times": [], "b": []})
    for r in range(a.reps):
        for pt in points:
            d = train(pt["n"], a.deck, base + pt["sets"], a.out, f"{pt['s']}_n{pt['n']}_r{r}")
            pt["times"].append(steady_seconds_per_step(d, batch))
            sm = summary(d)
            pt["b"].append((sm["bubble_fraction"], sm.get("network_bytes_per_sample", 0),
                            sm.get("communication_reduction_vs_bsp", 0)))
    t1 = None
    for pt in points:
        n, s, times, b = pt["n"], pt["s"], pt["times"], pt["b"]
        med = statistics.median(times)
        if n == 1:
            t1 = med
        for sched in (a.schedules if n == 1 else [s]):  # one rank is every schedule's baseline
            rows.append({"schedule": sched, "ranks": n, "kind": "measured", "seconds_per_step": med,
                         "seconds_min": min(times), "seconds_max": max(times), "samples_per_s": batch / med,
                         "bubble": statistics.median(x[0] for x in b),
                         "bytes_per_sample": statistics.median(x[1] for x in b),
                         "comm_reduction_vs_bsp": statistics.median(x[2] for x in b), "layout": pt["label"]})
        print(f"  measured {s:16s} {n:3d} ranks {med * 1e3:8.2f} ms/step ({min(times) * 1e3:.2f}-{max(times) * 1e3:.2f})",
              flush=True)
    # predicted by the simulator from the profile
    pt1 = None
    for n in [1] + a.predict:
        for s in a.schedules:
            if n == 1 and pt1 is not None:
                continue
            p = plan(a.deck, n, prof, s if n > 1 else "1f1b", a.out)
            pr = predicted(p, s if n > 1 else "1f1b")
            sec = pr["time_per_sample"] * batch
            if n == 1:
                pt1 = sec
                continue
            bsp_bytes = predicted(p, "bsp")["bytes"] if "bsp" in p.get("baselines", {}) else 0
            rows.append({"schedule": s, "ranks": n, "kind": "predicted", "seconds_per_step": sec, "seconds_min": sec,
                         "seconds_max": sec, "samples_per_s": batch / sec, "bubble": pr["bubble"],
                         "bytes_per_sample": pr["bytes"],
                         "comm_reduction_vs_bsp": (1 - pr["bytes"] / bsp_bytes) if bsp_bytes else 0.0,
                         "layout": pr["layout"]})
    for r in rows:
        ref = t1 if r["kind"] == "measured" else pt1
        r["speedup"] = ref / r["seconds_per_step"]
        r["efficiency"] = r["speedup"] / r["ranks"]
    csv_path = os.path.join(a.out, "strong_scaling.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    lines = ["| schedule | ranks | kind | layout | ms/step (range) | samples/s | speedup | efficiency | bubble | bytes/sample | comm. reduction vs bsp |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["schedule"], r["kind"] != "measured", r["ranks"])):
        rng = "" if r["kind"] == "predicted" else f" ({r['seconds_min'] * 1e3:.1f}-{r['seconds_max'] * 1e3:.1f})"
        lines.append(f"| {r['schedule']} | {r['ranks']} | {r['kind']} | {r['layout']} | {r['seconds_per_step'] * 1e3:.1f}{rng} | "
                     f"{r['samples_per_s']:.0f} | {r['speedup']:.2f} | {r['efficiency']:.2f} | {r['bubble']:.3f} | "
                     f"{r['bytes_per_sample']:.0f} | {100 * r['comm_reduction_vs_bsp']:.1f}% |")
    table = "\n".join(lines)
    with open(os.path.join(a.out, "strong_scaling.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"wrote {csv_path} and strong_scaling.md (measured: median of {a.reps} runs; predicted: simulator on "
          f"{prof}, network as measured between 2 ranks of this machine unless the deck has [[cluster.levels]])")
    plot(["scaling", csv_path, "--title", f"strong scaling: {os.path.basename(a.deck)}, minibatch {batch}"])


def accuracy(a):
    os.makedirs(a.out, exist_ok=True)
    rows, runs = [], []
    for s in a.schedules:
        sets = [f"train.epochs={a.epochs}", f"train.eval_every={a.eval_every}", f"train.target_accuracy={a.target}",
                "train.log_every=100"]
        if a.lr:
            sets.append(f"train.lr={a.lr}")
        if a.momentum is not None:
            sets.append(f"train.momentum={a.momentum}")
        if s == "bsp":
            sets += bsp_sets(a.ranks)
        else:
            sets += [f"parallel.schedule={s}", f"parallel.split={a.split}", f"parallel.microbatches={a.microbatches}"]
        print(f"  training {s} on {a.ranks} ranks ...", flush=True)
        d = train(a.ranks, a.deck, sets, a.out, f"tta_{s}")
        runs.append(d)
        m = [x for x in metrics(d) if "test_accuracy" in x]
        hit = next((x for x in m if x["test_accuracy"] >= a.target), None)
        sm = summary(d)
        steps_per_epoch = max(x["step"] for x in m if x["type"] == "epoch") / max(1, sum(1 for x in m if x["type"] == "epoch"))
        rows.append({"schedule": s + ("" if sm.get("valid_gradients", True) else " (invalid)"),
                     "epochs_to_target": f"{hit['step'] / steps_per_epoch:.2f}" if hit else "not reached",
                     "seconds_to_target": f"{hit['elapsed_s']:.1f}" if hit else "not reached",
                     "final_accuracy": f"{sm['final_test_accuracy']:.4f}", "samples_per_s": f"{sm['samples_per_s']:.0f}",
                     "layout": f"split {sm['split']} replicas {sm['replicas']} M={sm['microbatches']}"})
    csv_path = os.path.join(a.out, "time_to_accuracy.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    lines = [f"| schedule | epochs to {a.target} | seconds to {a.target} | final accuracy | samples/s | layout |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['schedule']} | {r['epochs_to_target']} | {r['seconds_to_target']} | {r['final_accuracy']} | "
              f"{r['samples_per_s']} | {r['layout']} |" for r in rows]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "time_to_accuracy.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"wrote {csv_path} and time_to_accuracy.md")
    plot(["accuracy", *runs, "--out", os.path.join(a.out, "time_to_accuracy.png"), "--target", str(a.target),
          "--title", f"test accuracy against wall time: {os.path.basename(a.deck)} on {a.ranks} ranks"])


def plot(args):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plots skipped: python3-matplotlib is not installed (make deps-dev)")
        return
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot.py"), *args], check=False)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    names = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    s = sub.add_parser("scaling")
    s.add_argument("--deck", default="input/fashion_cnn.toml")
    s.add_argument("--ranks", type=ints, default=[1, 2])
    s.add_argument("--predict", type=ints, default=[4, 8, 16, 32, 64])
    s.add_argument("--schedules", type=names, default=["bsp", "1f1b", "pipedream", "gpipe"])
    s.add_argument("--reps", type=int, default=3)
    s.add_argument("--steps", type=int, default=40)
    s.add_argument("--log-every", type=int, default=5)
    s.add_argument("--batch", type=int, default=128)
    s.add_argument("--out", default="runs/bench_strong_scaling")
    b = sub.add_parser("ablation")
    b.add_argument("--deck", default="input/fashion_cnn.toml")
    b.add_argument("--measure", type=ints, default=[2])
    b.add_argument("--predict", type=ints, default=[2, 4, 8, 16])
    b.add_argument("--reps", type=int, default=3)
    b.add_argument("--steps", type=int, default=40)
    b.add_argument("--log-every", type=int, default=5)
    b.add_argument("--batch", type=int, default=128)
    b.add_argument("--microbatches", type=int, default=4)
    b.add_argument("--out", default="runs/bench_ablation")
    t = sub.add_parser("accuracy")
    t.add_argument("--deck", default="input/fashion_cnn.toml")
    t.add_argument("--ranks", type=int, default=2)
    t.add_argument("--schedules", type=names,
                   default=["bsp", "gpipe", "1f1b", "pipedream", "pipedream-vsync", "2bw", "pipedream-nostash"])
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--eval-every", type=int, default=78)
    t.add_argument("--target", type=float, default=0.88)
    t.add_argument("--split", default="[3]")
    t.add_argument("--microbatches", type=int, default=4)
    t.add_argument("--lr", type=float, default=0.0, help="learning rate for every schedule (default: the deck's)")
    t.add_argument("--momentum", type=float, default=None, help="SGD momentum for every schedule (default: the deck's)")
    t.add_argument("--out", default="runs/bench_time_to_accuracy")
    v = sub.add_parser("predict")
    v.add_argument("--deck", default="input/fashion_cnn.toml")
    v.add_argument("--ranks", type=int, default=2)
    v.add_argument("--schedules", type=names,
                   default=["bsp", "gpipe", "1f1b", "model-parallel", "pipedream", "2bw"])
    v.add_argument("--split", default="[3]")
    v.add_argument("--microbatches", type=int, default=4)
    v.add_argument("--reps", type=int, default=3)
    v.add_argument("--steps", type=int, default=40)
    v.add_argument("--log-every", type=int, default=5)
    v.add_argument("--batch", type=int, default=128)
    v.add_argument("--tolerance", type=float, default=0.10)
    v.add_argument("--median-tolerance", type=float, default=0.05)
    v.add_argument("--set", dest="extra", action="append", default=[],
                   help="a deck override for the profile, the simulator and every run (repeatable)")
    v.add_argument("--out", default="runs/bench_predicted_vs_measured")
    a = p.parse_args()
    {"scaling": scaling, "accuracy": accuracy, "ablation": ablation, "predict": predict}[a.cmd](a)


if __name__ == "__main__":
    main()
