#!/usr/bin/python3
"""Record what PipeDream's own optimizer says about the published graph.txt profiles.

Contract: runs optimizer/optimizer_graph_hierarchical.py of a PipeDream checkout (or bare
git directory) on every case below and writes tests/fixtures/pipedream_partitions.json,
which tests/unit/test_pipedream_model.cpp compares `--cost-model pipedream` against. It
needs only the standard library: PipeDream's optimizer, utils.py and graph/ are copied to a
temporary directory outside this repository (never into it), with two stand-ins there:
`numpy` (the script only prints np.array(...) of its tables) and `graphviz` (only used to
draw the partitioned graph). PipeDream's code is not changed.

    /usr/bin/python3 tools/pipedream_reference.py --pipedream /path/to/pipedream[.git] \
        [--profiles ../shared/data/pipedream-profiles] [--out tests/fixtures/pipedream_partitions.json]

Per case the fixture holds PipeDream's arguments, its predicted time per minibatch
("Time per stage in pipeline"), its data-parallel estimate, each level's partition as it
prints it (state ranges and replication), and the node ids of every final stage with the
total replication of that stage (product over levels), read from the stage_id it writes
into gpus=N.txt.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FILES = ["optimizer/optimizer_graph_hierarchical.py", "optimizer/utils.py", "graph/__init__.py", "graph/graph.py"]

NUMPY_STUB = "class _A:\n    def __init__(self, x): self.n = len(x)\n    def __repr__(self): return '<%d rows>' % self.n\n" \
             "def array(x): return _A(x)\n"
GRAPHVIZ_STUB = "class Digraph:\n    def node(self, *a, **k): pass\n    def edge(self, *a, **k): pass\n" \
                "    def render(self, *a, **k): pass\n"

# (profile, machines per level innermost first, bandwidth per level, options)
CASES = []
for prof in ["vgg16", "alexnet", "resnet18", "resnet50", "gnmt", "gnmt_large"]:
    for n in [2, 4, 8, 16]:
        for bw in [1e9, 1e10]:
            CASES.append((prof, [n], [bw], {}))
for prof in ["vgg16", "resnet18", "gnmt"]:
    CASES.append((prof, [4, 4], [1e10, 1e9], {}))
    CASES.append((prof, [8, 2], [2.5e10, 1.25e9], {}))
    CASES.append((prof, [8], [1e9], {"activation_compression_ratio": 1.0}))
    CASES.append((prof, [4, 2], [1e10, 1e9], {"activation_compression_ratio": 1.0}))
    CASES.append((prof, [8], [1e10], {"straight_pipeline": True}))
    CASES.append((prof, [8], [1e9], {"use_memory_constraint": True, "memory_size": 2e9}))
    CASES.append((prof, [8], [1e9], {"use_fewer_machines": True}))
for n in [24, 32]:
    CASES.append(("vgg16", [n], [1e9], {}))

DRIVER = r"""
import json, sys
sys.path.insert(0, %(root)r)
import optimizer_graph_hierarchical as o
opts = json.loads(%(opts)r)
o.straight_pipeline = opts.get("straight_pipeline", False)
o.use_memory_constraint = opts.get("use_memory_constraint", False)
o.memory_size = opts.get("memory_size", 16e9)
o.use_fewer_machines = opts.get("use_fewer_machines", False)
o.activation_compression_ratio = opts.get("activation_compression_ratio", None)
pp, dp = o.main(%(machines)r, %(profile)r, %(bandwidths)r, o.memory_size, o.straight_pipeline,
                o.use_memory_constraint, o.use_fewer_machines, o.activation_compression_ratio,
                %(outdir)r, print_configuration=True, verbose=True)
print("RESULT " + json.dumps({"pipeline": pp, "data_parallel": dp}))
"""


def copy_sources(src, dst):
    bare = os.path.isdir(os.path.join(src, "objects")) and os.path.isfile(os.path.join(src, "HEAD"))
    git = ["git", "--git-dir", src] if bare else ["git", "-C", src]
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for f in FILES:
        os.makedirs(os.path.join(dst, os.path.dirname(f)), exist_ok=True)
        if bare:
            text = subprocess.run(git + ["show", "HEAD:" + f], capture_output=True, text=True, check=True).stdout
            open(os.path.join(dst, f), "w").write(text)
        else:
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    open(os.path.join(dst, "numpy.py"), "w").write(NUMPY_STUB)
    open(os.path.join(dst, "graphviz.py"), "w").write(GRAPHVIZ_STUB)
    return commit or "unknown"


def parse_levels(stdout):
    """Each level's printed partitions, outermost first: [[[start, end, replicas], ...], ...]."""
    levels, cur = [], None
    for line in stdout.splitlines():
        if re.match(r"^Level \d+$", line.strip()):
            cur = []
            levels.append(cur)
        m = re.match(r"^\((\d+), (\d+)\) \S+ (\d+)$", line.strip())
        if m and cur is not None:
            cur.append([int(m.group(1)), int(m.group(2)), int(m.group(3))])
    return levels


def final_stages(levels, graph_out):
    """Node ids per final stage (stage_id order) and each stage's replication over all levels."""
    reps = [r for (_, _, r) in levels[0]]
    for outer, inner in zip(levels, levels[1:]):  # an inner level refines each outer stage
        reps = [r * reps[next(i for i, (a, b, _) in enumerate(outer) if a <= s and e <= b)] for (s, e, r) in inner]
    stages = [[] for _ in reps]
    for line in open(graph_out).read().splitlines():
        if line.startswith("\t"):
            continue
        m = re.match(r"^(\S+) -- .* -- stage_id=(\d+)$", line)
        if m and not re.match(r"^\S+ -- Input", line):
            stages[int(m.group(2))].append(m.group(1))
    return [{"replicas": r, "nodes": sorted(n, key=lambda x: (len(x), x))} for r, n in zip(reps, stages)]


def run_case(tmp, profiles, case):
    prof, machines, bws, opts = case
    outdir = tempfile.mkdtemp(dir=tmp)
    path = os.path.join(profiles, prof + ".graph.txt")
    code = DRIVER % {"root": tmp, "opts": json.dumps(opts), "machines": machines, "profile": path,
                     "bandwidths": bws, "outdir": outdir}
    r = subprocess.run([sys.executable, "-c", code], cwd=os.path.join(tmp, "optimizer"), capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit("PipeDream's optimizer failed on %s:\n%s" % (case, r.stderr[-3000:]))
    res = json.loads(next(l for l in r.stdout.splitlines() if l.startswith("RESULT "))[7:])
    levels = parse_levels(r.stdout)
    total = 1
    for n in machines:
        total *= n
    stages = final_stages(levels, os.path.join(outdir, "gpus=%d.txt" % total))
    states = int(re.search(r"Total number of states: (\d+)", r.stdout).group(1))
    return {"profile": prof + ".graph.txt", "machines": machines, "bandwidths": bws, "options": opts,
            "states": states, "time_per_minibatch_s": res["pipeline"], "data_parallel_s": res["data_parallel"],
            "levels": levels, "stages": stages}


def repeated(tmp, profiles, case, runs):
    """PipeDream breaks ties between equal objectives by the iteration order of Python sets
    of graph nodes (memory addresses), so its partition may change from run to run when
    several are optimal: every distinct partition seen in `runs` runs is recorded."""
    first = run_case(tmp, profiles, case)
    first["other_partitions"] = []
    for _ in range(runs - 1):
        again = run_case(tmp, profiles, case)
        if abs(again["time_per_minibatch_s"] - first["time_per_minibatch_s"]) > 1e-9 * first["time_per_minibatch_s"]:
            raise SystemExit("PipeDream's objective changed between runs of %s" % (case,))
        if again["stages"] != first["stages"] and again["stages"] not in first["other_partitions"]:
            first["other_partitions"].append(again["stages"])
    first["runs"] = runs
    return first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipedream", required=True, help="PipeDream checkout or bare git directory")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--profiles", default=os.path.join(os.path.dirname(root), "shared", "data", "pipedream-profiles"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "pipedream_partitions.json"))
    ap.add_argument("--runs", type=int, default=3, help="runs per case (PipeDream's ties vary between runs)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pipedream-optimizer-")
    try:
        commit = copy_sources(a.pipedream, tmp)
        cases = []
        for c in CASES:
            cases.append(repeated(tmp, a.profiles, c, a.runs))
            print("%-20s n=%-8s b=%-18s %s  %.6g s" % (c[0], c[1], c[2], c[3] or "", cases[-1]["time_per_minibatch_s"]))
    finally:
        shutil.rmtree(tmp)
    doc = {"format": "pipetrain-pipedream-reference-1",
           "produced_by": "tools/pipedream_reference.py (PipeDream's optimizer_graph_hierarchical.py, %s)" % sys.version.split()[0],
           "pipedream_commit": commit, "cases": cases}
    with open(a.out, "w") as f:  # one case per line
        head = json.dumps({k: v for k, v in doc.items() if k != "cases"})[:-1]
        f.write(head + ', "cases": [\n' + ",\n".join(json.dumps(c) for c in cases) + "\n]}\n")
    print("wrote %s (%d cases)" % (a.out, len(cases)))


if __name__ == "__main__":
    main()
