#!/usr/bin/env python3
"""Train a deck in pipetrain and in PyTorch from the same initial weights on the same
batches, and compare the per-step training losses.

    tools/pytorch_twin.py DECK [--steps 20] [--set key=value]... [--ranks N] [--tol 1e-4]
                          [--out DIR] [--bin build/pipetrain] [--timeout 1800]

1. Runs `build/pipetrain train DECK` (mpirun -np N, N = --ranks, default 1) for --steps
   optimizer steps (train.max_steps) with run.initial_weights = true, train.log_every = 1,
   evaluation only at the end, no plots and no final checkpoint, into a temporary run
   directory (--out keeps it). With one rank the deck's split is replaced by
   parallel.split = [] (one stage) unless --set gives one; with --ranks N give the layout
   with --set (parallel.split = "auto" lets the planner choose).
2. Builds the same model in PyTorch from the run's effective deck.toml and loads
   weights_init.h5 (tools/to_pytorch.py's builder: docs/MODELS.md; a tied head's weight is
   the embedding's token weight Parameter itself).
3. Feeds it pipetrain's batches: the epoch permutation and the text training windows are
   recomputed from pipetrain's counter-based RNG (include/pipetrain/rng.hpp,
   src/data/datasets.cpp epoch_permutation, src/data/sequence_dataset.cpp
   train_window_offset), minibatch t of an epoch being samples perm[t*B:(t+1)*B], cut into
   M = parallel.microbatches microbatches of B/M: one forward per microbatch (batch norm
   normalises with each microbatch's statistics), the loss scaled by 1/B, gradients summed.
4. Steps torch.optim.AdamW or SGD (the same update rules as src/optim/optimizer.cpp) with the
   learning rate of pipetrain's learning_rate() (warm-up and step/cosine schedule over the
   run's total steps) set before every step.
5. Prints each step's two losses and

       max relative per-step loss difference: 3.1e-07 (step 17)

   With train.clip_grad_norm > 0 the twin clips with torch.nn.utils.clip_grad_norm_ after the
   backward passes of a step, and each step's gradient norm before clipping (the value it
   returns) is compared with metrics.jsonl's grad_norm under the same tolerance:

       max relative per-step grad_norm difference: 2.0e-07 (step 3); clipping acted on 20 of 20 steps

   and checks the logged learning rates against the schedule's (they must agree to 1e-9).
   The final weights of both are compared too (printed, not a pass criterion: AdamW's
   normalised steps amplify rounding differences in near-zero gradients).

float32 throughout, torch.set_num_threads(1). Only what a twin can reproduce: no dropout
(every dropout probability must be 0), a flush schedule (gpipe, 1f1b, bsp, model-parallel,
interleaved-1f1b, zb-*: each update uses the gradient of the current weights; the
asynchronous pipedream family and 2bw are refused), data from fashion-mnist, hdf5, text or
tokens (synthetic samples exist only inside pipetrain).

Exit codes: 0 within the tolerance; 10 a loss (or learning rate, or gradient norm) differs
beyond it; 2 bad input (deck, options, something a twin cannot reproduce); 3 pipetrain failed
or a file could not be read; 4 python3-torch, python3-h5py or python3-numpy is missing.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import to_pytorch as tp  # noqa: E402  (the model builder and the data readers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASYNC_SCHEDULES = ("pipedream", "pipedream-nostash", "pipedream-vsync", "2bw")


def die(code, msg):
    print(f"pytorch_twin: {msg}", file=sys.stderr)
    sys.exit(code)


# ---- pipetrain's counter-based RNG (include/pipetrain/rng.hpp), 64-bit unsigned arithmetic ----

M64 = (1 << 64) - 1
STREAM_SHUFFLE = 2
WINDOW_SALT = 0x77696E646F77  # kWindowSalt in src/data/sequence_dataset.cpp ("window")


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def rng_key(seed, stream, a=0, b=0):
    inner = splitmix64((seed & M64) ^ splitmix64(stream))
    return splitmix64(splitmix64(inner ^ (a & M64)) ^ ((b * 0xD1B54A32D192ED03) & M64))


def rng_bits(key, i):
    return splitmix64(key ^ splitmix64((i + 0x632BE59BD9B4E019) & M64))


def rng_below(key, i, n):
    return (rng_bits(key, i) * n) >> 64


def epoch_permutation(n, seed, epoch):
    """Fisher-Yates from the top, j = rng_below(key, i, i + 1) (src/data/datasets.cpp)."""
    p = list(range(n))
    key = rng_key(seed, STREAM_SHUFFLE, epoch)
    for i in range(n - 1, 0, -1):
        j = rng_below(key, i, i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def train_window_offset(seed, epoch, i, region_len, seq_len):
    """First position of training window i in epoch e (src/data/sequence_dataset.cpp)."""
    key = rng_key(seed, STREAM_SHUFFLE, epoch, WINDOW_SALT)
    return rng_below(key, i, region_len - seq_len)


def learning_rate(t, update, total):
    """src/optim/optimizer.cpp learning_rate(): schedule, then linear warm-up; cosine never goes
    below min_lr again once the ramped rate has reached it."""
    lr = ramped_rate(t, update, total)
    if t.get("lr_schedule", "constant") != "cosine" or lr >= float(t.get("min_lr", 0.0)):
        return lr
    if update >= int(t.get("warmup_steps", 0)):
        return lr
    lo = float(t.get("min_lr", 0.0))
    return lo if any(ramped_rate(t, u, total) >= lo for u in range(update)) else lr


def ramped_rate(t, update, total):
    lr = float(t.get("lr", 0.05))
    sched = t.get("lr_schedule", "constant")
    if sched == "step":
        lr *= math.pow(float(t.get("gamma", 0.1)), float(update // int(t.get("step_size", 1000))))
    elif sched == "cosine":
        frac = min(1.0, update / total) if total > 0 else 0.0
        lo = float(t.get("min_lr", 0.0))
        lr = lo + 0.5 * (float(t.get("lr", 0.05)) - lo) * (1.0 + math.cos(math.pi * frac))
    warm = int(t.get("warmup_steps", 0))
    if update < warm:
        lr *= (update + 1) / warm
    return lr


# ---- the pipetrain side ----

def run_pipetrain(a, out):
    sets = list(a.set)
    user_keys = {s.split("=", 1)[0].strip() for s in sets}
    if a.ranks == 1 and "parallel.split" not in user_keys:
        sets.append("parallel.split=[]")
    sets += ["run.initial_weights=true", "train.log_every=1", "run.plots=false", f"run.output_dir={out}",
             "run.name=twin", f"train.max_steps={a.steps}", "checkpoint.at_end=false", "train.eval_every=0"]
    cmd = [a.bin, "train", a.deck]
    for s in sets:
        cmd += ["--set", s]
    mpirun = shutil.which("mpirun")
    if a.ranks > 1 or mpirun:
        if not mpirun:
            die(2, f"--ranks {a.ranks} needs mpirun (Open MPI)")
        flags = (["--allow-run-as-root"] if os.geteuid() == 0 else []) + ["--oversubscribe"]
        cmd = [mpirun, *flags, "-np", str(a.ranks)] + cmd
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    log = os.path.join(out, "pipetrain.log")
    print("pipetrain:", " ".join(cmd), flush=True)
    t0 = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc != 0:
        with open(log) as f:
            tail = f.read().splitlines()[-20:]
        print("\n".join("  | " + line for line in tail), file=sys.stderr)
        die(3 if rc != 2 else 2, f"pipetrain failed (exit {rc}); log: {log}")
    print(f"pipetrain: {a.steps} steps in {time.time() - t0:.1f} s (with start-up and the final evaluation)", flush=True)
    return os.path.join(out, "twin")


def read_steps(run_dir):
    steps = []
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "step":
                    steps.append(r)
    except (OSError, ValueError) as e:
        die(3, f"{path}: {e}")
    ks = [r["step"] for r in steps]
    if ks != list(range(1, len(ks) + 1)):
        die(3, f"{path}: step records are not 1..n (train.log_every = 1 expected): {ks[:5]}...")
    return steps


# ---- the PyTorch side ----

class Batches:
    """pipetrain's training samples: sample i of epoch e, as model input and labels."""

    def __init__(self, deck, attrs, np, torch, h5py):
        self.np, self.torch = np, torch
        data = deck.get("data", {})
        self.source = data.get("source", "fashion-mnist")
        self.seed = int(deck.get("run", {}).get("seed", 1))
        if self.source in ("text", "tokens"):
            self.T = int(data.get("seq_len", 128))
            self.tokens = tp.token_regions(deck, np, h5py)[0]
            self.L = len(self.tokens)
            self.n = self.L // (self.T + 1)
        elif self.source in ("fashion-mnist", "hdf5"):
            self.x, self.y = tp.image_split(deck, attrs, np, h5py, "train")
            self.n = len(self.y)
        else:
            die(2, f"data.source = \"{self.source}\": synthetic samples exist only inside pipetrain")
        self.perms = {}

    def perm(self, epoch):
        if epoch not in self.perms:
            self.perms = {epoch: epoch_permutation(self.n, self.seed, epoch)}
        return self.perms[epoch]

    def get(self, idx, epoch):
        np, torch = self.np, self.torch
        if self.source in ("text", "tokens"):
            T = self.T
            starts = np.array([train_window_offset(self.seed, epoch, i, self.L, T) for i in idx], dtype=np.int64)
            w = self.tokens[starts[:, None] + np.arange(T + 1)[None, :]]
            return torch.from_numpy(w[:, :T].astype(np.float32)), torch.from_numpy(w[:, 1:].copy())
        ii = np.asarray(idx, dtype=np.int64)
        return torch.from_numpy(self.x[ii]), torch.from_numpy(self.y[ii])


def check_reproducible(deck):
    for i, spec in enumerate(deck.get("model", {}).get("layers", [])):
        p = tp.dropout_of(spec)
        if p > 0:
            die(2, f"layer {i} ({spec.get('type')}) has dropout {p}: pipetrain's dropout masks come from its own "
                   "counter-based stream, not PyTorch's, so the twin needs every dropout probability at 0 "
                   f"(--set model.layers.{i}.{'p' if spec.get('type') == 'dropout' else 'dropout'}=0)")
    sched = deck.get("parallel", {}).get("schedule", "1f1b")
    if sched in ASYNC_SCHEDULES:
        die(2, f"parallel.schedule = \"{sched}\" updates with stale or stashed weight versions; the twin reproduces "
               "flush schedules only (each update uses the current weights' gradient): pass --set parallel.schedule=1f1b")


def precheck(a):
    """Refuse before the pipetrain run what check_reproducible would refuse after it, as far as
    the deck file and the --set values tell (the effective deck is checked again)."""
    try:
        with open(a.deck, "rb") as f:
            deck = tp.tomllib.load(f)
    except (OSError, tp.tomllib.TOMLDecodeError) as e:
        die(2, f"{a.deck}: {e}")
    for kv in a.set:
        try:
            torch_set(deck, kv, quiet=True)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError):
            pass  # pipetrain reports a bad key itself
    check_reproducible(deck)


def torch_set(deck, kv, quiet=False):
    """--torch-set KEY=VALUE: KEY dotted as in --set (model.layers.N.key reaches layer N), VALUE as TOML."""
    if "=" not in kv:
        die(2, f"--torch-set {kv}: expected KEY=VALUE")
    key, text = (x.strip() for x in kv.split("=", 1))
    try:
        value = tp.tomllib.loads(f"v = {text}")["v"]
    except Exception:  # a bare word: a string, as pipetrain's --set takes it
        value = text
    node, parts = deck, key.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = value
    if not quiet:
        print(f"twin: PyTorch side only: {key} = {value!r}")


def make_optimizer(train, params, torch):
    lr = float(train.get("lr", 0.05))
    wd = float(train.get("weight_decay", 0.0))
    if train.get("optimizer", "sgd") == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(float(train.get("beta1", 0.9)), float(train.get("beta2", 0.999))),
                                 eps=float(train.get("eps", 1e-8)), weight_decay=wd)
    m = float(train.get("momentum", 0.9))
    return torch.optim.SGD(params, lr=lr, momentum=m, weight_decay=wd, nesterov=bool(train.get("nesterov", False)) and m > 0)


def compare_weights(model, path, deck, torch, h5py):
    """Largest difference per tensor between the twin's final weights and pipetrain's weights.h5,
    relative to the tensor's largest magnitude."""
    worst = (0.0, "")
    with h5py.File(path, "r") as wf:
        groups = wf["layers"]
        specs = deck.get("model", {}).get("layers", [])
        mods = list(model)
        mi = 0
        for i, spec in enumerate(specs):
            if spec.get("type") == "softmax_cross_entropy":
                continue
            m, g = mods[mi], groups[f"{i:03d}"]
            mi += 1
            pairs = [(n, p.detach()) for n, p in tp.h5_params(m)]
            st = tp.h5_state(m, torch)
            if st:
                pairs.append(("state", torch.cat([b.detach() for b in st])))
            for name, t in pairs:
                if name not in g:
                    continue
                ref = torch.from_numpy(g[name][()]).reshape(t.shape)
                rel = float((t - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)
                if rel > worst[0]:
                    worst = (rel, f"layer {i} {name}")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("deck")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to pipetrain train")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative per-step loss difference (default 1e-4)")
    ap.add_argument("--out", help="run pipetrain into this folder and keep it (default: a temporary folder)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "pipetrain"))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the pipetrain run")
    ap.add_argument("--float64", action="store_true",
                    help="also train a float64 PyTorch copy: how far float32 rounding alone moves this trajectory")
    ap.add_argument("--torch-set", action="append", default=[], metavar="KEY=VALUE",
                    help="change the PyTorch side's deck only (a what-if, or a negative control: the twin must then differ)")
    a = ap.parse_args()
    if a.steps < 1 or a.ranks < 1:
        die(2, "--steps and --ranks must be at least 1")
    if not os.path.isfile(a.deck):
        die(2, f"{a.deck}: no such deck")
    if not os.access(a.bin, os.X_OK):
        die(3, f"{a.bin}: not built (make)")
    if tp.tomllib is None:
        die(2, "needs Python 3.11 (tomllib) to read decks")
    precheck(a)
    np, torch, h5py = tp.need_modules()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    out = a.out or tempfile.mkdtemp(prefix="pt_twin.")
    os.makedirs(out, exist_ok=True)
    ok = False
    try:
        run_dir = run_pipetrain(a, os.path.abspath(out))
        deck = tp.read_deck(run_dir)
        check_reproducible(deck)
        for kv in a.torch_set:
            torch_set(deck, kv)
        ok = twin(a, deck, run_dir, np, torch, h5py)
    finally:
        if not a.out and ok:
            shutil.rmtree(out, ignore_errors=True)
        elif not ok:
            print(f"pipetrain's run is kept in {out}", file=sys.stderr)
    sys.exit(0 if ok else 10)


def twin(a, deck, run_dir, np, torch, h5py):
    steps = read_steps(run_dir)
    train = deck.get("train", {})
    B = int(train.get("batch_size", 128))
    M = int(deck.get("parallel", {}).get("microbatches", 1))
    if B % M:
        die(2, f"train.batch_size {B} is not a multiple of parallel.microbatches {M}")
    mb = B // M
    wpath = os.path.join(run_dir, "weights_init.h5")
    try:
        wf = h5py.File(wpath, "r")
    except OSError as e:
        die(3, f"{wpath}: {e}")
    with wf:
        model, loss_fn = tp.build(deck, wf, torch)
        attrs = dict(wf.attrs)
    data = Batches(deck, attrs, np, torch, h5py)
    spe = data.n // B
    total = min(int(train.get("epochs", 1)) * spe, a.steps)
    if spe < 1:
        die(2, f"train.batch_size {B} leaves no full minibatch in {data.n} training samples")
    if len(steps) != total:
        die(3, f"pipetrain logged {len(steps)} steps, the twin expects {total} "
               f"(min(epochs {train.get('epochs', 1)} x {spe} steps per epoch, --steps {a.steps}))")
    tokens = data.source in ("text", "tokens")
    per_sample = data.T if tokens else 1  # the head averages over the T positions of a sample
    print(f"twin: {sum(p.numel() for p in model.parameters())} parameters (tied ones once), {data.n} training samples, "
          f"batch {B} in {M} microbatch{'es' if M > 1 else ''} of {mb}, {train.get('optimizer', 'sgd')}, "
          f"{total} steps, layout {deck.get('parallel', {}).get('split')} {deck.get('parallel', {}).get('schedule')}")
    t0 = time.time()
    ours, lrs, norms = train_steps(model, loss_fn, data, train, total, spe, B, M, per_sample, torch)
    elapsed = time.time() - t0
    wide = None
    if a.float64:
        with h5py.File(wpath, "r") as wf:
            model64, _ = tp.build(deck, wf, torch)
        wide, _, _ = train_steps(model64.double(), loss_fn, data, train, total, spe, B, M, per_sample, torch, torch.float64)
    print(f"{'step':>5} {'pipetrain':>12} {'pytorch':>12} {'rel. diff':>10} {'lr':>11}" +
          (f" {'grad norm':>12} {'torch norm':>12} {'rel. diff':>10}" if norms else "") +
          (f" {'float64':>12} {'f32 vs f64':>10}" if wide else ""))
    worst, worst_step, worst_lr, worst64, worst64_step = 0.0, 0, 0.0, 0.0, 0
    worst_norm, worst_norm_step = 0.0, 0
    for k in range(1, total + 1):
        ref, got = float(steps[k - 1]["loss"]), ours[k - 1]
        rel = abs(got - ref) / max(abs(ref), 1e-30)
        if not math.isfinite(rel):
            rel = math.inf
        if rel > worst or worst_step == 0:
            worst, worst_step = rel, k
        lr_ref = float(steps[k - 1].get("lr", lrs[k - 1]))
        worst_lr = max(worst_lr, abs(lrs[k - 1] - lr_ref) / max(abs(lr_ref), 1e-30))
        line = f"{k:5d} {ref:12.6f} {got:12.6f} {rel:10.2e} {lrs[k - 1]:11.4e}"
        if norms:
            n_ref = steps[k - 1].get("grad_norm")
            n_ref = math.nan if n_ref is None else float(n_ref)
            n_rel = abs(norms[k - 1] - n_ref) / max(abs(n_ref), 1e-30)
            if not math.isfinite(n_rel):
                n_rel = math.inf
            if n_rel > worst_norm or worst_norm_step == 0:
                worst_norm, worst_norm_step = n_rel, k
            line += f" {n_ref:12.6g} {norms[k - 1]:12.6g} {n_rel:10.2e}"
        if wide:
            r64 = abs(got - wide[k - 1]) / max(abs(wide[k - 1]), 1e-30)
            if r64 > worst64:
                worst64, worst64_step = r64, k
            line += f" {wide[k - 1]:12.6f} {r64:10.2e}"
        print(line)
    print(f"twin: {total} steps in PyTorch in {elapsed:.1f} s")
    rel_w, where = compare_weights(model, os.path.join(run_dir, "weights.h5"), deck, torch, h5py)
    print(f"final weights (information): largest difference {rel_w:.2e} of the tensor's largest magnitude ({where})")
    print(f"learning rates: max relative difference {worst_lr:.1e}")
    if wide:
        print(f"PyTorch float32 vs float64 (rounding alone, amplified by this trajectory): max {worst64:.2e} "
              f"(step {worst64_step})")
    print(f"max relative per-step loss difference: {worst:.2e} (step {worst_step})")
    if norms:
        clipped = sum(1 for n in norms if n > float(train.get("clip_grad_norm", 0.0)))
        print(f"max relative per-step grad_norm difference: {worst_norm:.2e} (step {worst_norm_step}); "
              f"clipping acted on {clipped} of {total} steps")
    ok = worst <= a.tol and worst_lr <= 1e-9 and worst_norm <= a.tol
    print(("PASS" if ok else "FAIL") + f": tolerance {a.tol:g}" + ("" if worst_lr <= 1e-9 else "; the learning rates differ"))
    if not ok and wide and worst <= 2 * worst64:
        print("note: PyTorch's own float32 run is as far from its float64 run: the trajectory amplifies rounding "
              "(lower train.lr or --steps to compare the arithmetic)")
    return ok


def train_steps(model, loss_fn, data, train, total, spe, B, M, per_sample, torch, dtype=None):
    """pipetrain's steps in PyTorch: per step the lr of learning_rate(), M microbatches of B/M
    samples, each forward separately (batch norm: microbatch statistics), loss / B (tokens: / (B T)),
    gradients summed, with train.clip_grad_norm > 0 torch.nn.utils.clip_grad_norm_ over every
    parameter (a tied one once), one optimizer step. Returns the step losses, learning rates and
    gradient norms before clipping (empty without clipping)."""
    model.train()
    opt = make_optimizer(train, list(model.parameters()), torch)
    clip = float(train.get("clip_grad_norm", 0.0))
    mb = B // M
    losses, lrs, norms = [], [], []
    for k in range(1, total + 1):
        epoch, t = (k - 1) // spe, (k - 1) % spe
        idx = data.perm(epoch)[t * B:(t + 1) * B]
        lr = learning_rate(train, k - 1, total)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for m in range(M):
            x, y = data.get(idx[m * mb:(m + 1) * mb], epoch)
            if dtype is not None and x.is_floating_point() and data.source not in ("text", "tokens"):
                x = x.to(dtype)
            loss = loss_fn(model(x), y) / (B * per_sample)
            loss.backward()
            step_loss += float(loss)
        if clip > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        losses.append(step_loss)
        lrs.append(lr)
    return losses, lrs, norms


if __name__ == "__main__":
    main()
