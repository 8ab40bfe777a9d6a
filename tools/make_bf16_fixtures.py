#!/usr/bin/python3
"""Write the bf16 fixtures tests/fixtures/bf16_*.h5: PyTorch 1.13's bfloat16 autocast results
for every layer with a matrix kernel (and the engine's bf16 activation rounding), with a
float64 reference and a per-element first-order error bound, for
tests/unit/test_bf16_autocast.cpp (docs/PRECISION.md, "Agreement with PyTorch autocast";
tests/fixtures/README.md, "bf16 fixtures").

Run with Debian's interpreter, which has torch and h5py:  /usr/bin/python3 tools/make_bf16_fixtures.py
(about a minute; deterministic: fixed seeds, one thread). Torch is not needed at test time.

Per case the file holds the inputs pipetrain is given (x, params, dy, labels; float32, the
layouts of tools/make_fixtures.py) and, for each quantity q in y, dx, dparams:
  q          PyTorch 1.13 under torch.autocast("cpu", dtype=torch.bfloat16), float32 values;
  q_f64      the exact result for the stored float32 inputs (float64, no rounding), as float32;
  q_ref      the same in float64, but with the roundings both sides make identically applied
             (parameters and stored inputs rounded to bf16 where both feed them to a matrix kernel);
  q_bac      first-order bound on |autocast - q_ref| from autocast's other bf16 roundings;
  q_bpt      the same for pipetrain's bf16 roundings (docs/PRECISION.md; Stage::set_precision
             for the cases run through a Stage);
  q_b32      first-order bound of one implementation's float32 rounding: (K + 16) 2^-24 M, with
             K the longest accumulation of the case and M the magnitude sum below.

The error model. Each implementation is the exact computation with a relative perturbation of at
most u = 2^-8 (bf16 round to nearest even) wherever it rounds a value to bf16: a "site" is a
tensor t of the float64 emulation below; the implementation rounds its value (flag f: the value
feeds the rest of the computation rounded) and/or its gradient (flag b: the gradient flowing back
into t is rounded). To first order, quantity element i then moves by at most
    B_i = u * sum over rounding sites s of  sum_j |dQ_i / d(value or gradient of s)_j| * |(value or gradient)_j|,
computed exactly here with autograd (a site adds a zero perturbation to its value and one to its
gradient; the Jacobian of every output element with respect to both is formed row by row). M_i
is the same sum over every site with both flags, the scale of the float32 rounding. The test then
requires |pipetrain - autocast| <= (1 + 1/16) (B_pt + B_ac) + 2 b32 per element (the 1/16 covers
the neglected second-order terms, at most (number of sites on a path) * u < 1/16 of the
first-order sum), and this script checks autocast against its own half, |autocast - q_ref| <=
(1 + 1/16) B_ac + b32: a rounding that the model does not list for autocast would fail here.

The bound is a first-order one and therefore holds only where the computation is smooth: relu
inputs and the maxima of max pooling must not be within the bound of a kink or a tie. The data
are built for that: biases (and batch-norm shifts) put each relu's kink in the widest gap of its
unit's values in the middle half of the batch, and the script asserts the margins (relu inputs
farther from 0 than their bound; each pooling window's maximum ahead of the second by twice the
bound plus one bf16 spacing), trying the next seed where a case misses (the CNN chain's pooling
windows) and recording the seed used.

Shapes. PyTorch 1.13's CPU bf16 matmul runs oneDNN (fp32 accumulation, one rounding of the
result: exactly the model above) only when the product is larger than 16^3 multiply-adds
(mm, addmm: m n k > 4096; bmm: batch m n k > 4096 and m n k >= 400 per matrix); smaller products
go to a native kernel that accumulates in bf16 (measured up to 2.7 u sum|a||b| off the
fp32-accumulated result, against at most 1 u above the threshold). Every product here,
forward and backward, is above the threshold: the fixtures compare pipetrain with autocast
as it runs layers of training size. Convolutions always run on oneDNN.
"""
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (write(), flat(); sets one thread and deterministic algorithms)

U = 2.0 ** -8    # bf16 unit roundoff: 8 significant bits, round to nearest even
U32 = 2.0 ** -24  # float32 unit roundoff
SECOND_ORDER = 1.0 + 1.0 / 16.0
D64 = torch.float64


def rbf(t):
    """The bf16 value (RNE, c10::BFloat16, as pipetrain's bf16_round) of a float32-valued tensor, in float64."""
    return t.detach().float().bfloat16().double()


def rbf64(t):
    """The float64 value t rounded once to bf16 (8 significant bits, ties to even), in float64."""
    m, e = torch.frexp(t.detach())
    return torch.ldexp(torch.round(m * 256.0) / 256.0, e)


class _RoundGrad(torch.autograd.Function):
    """Identity whose backward rounds the gradient to bf16 (the emulations of one side)."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return rbf64(g)


class _AddGrad(torch.autograd.Function):
    """Identity whose backward adds a fixed tensor to the gradient."""

    @staticmethod
    def forward(ctx, t, delta):
        ctx.delta = delta
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g + ctx.delta, None


# ---------------------------------------------------------------------------------------
# the emulation: float64 autograd with rounding sites

class _Site(torch.autograd.Function):
    """Identity with a perturbation of the value (ef) and one of the gradient flowing back (eb).
    Its backward is differentiable, so the Jacobian of a gradient with respect to eb exists."""

    @staticmethod
    def forward(ctx, t, ef, eb):
        ctx.save_for_backward(eb)
        return t + ef

    @staticmethod
    def backward(ctx, g):
        (eb,) = ctx.saved_tensors
        return g + eb, g, None


class _SoftmaxReadsP(torch.autograd.Function):
    """Softmax over the last dimension, dS = P (g - sum(P g)), with perturbations of its backward:
    e2 on the P it reads (autocast's backward reads the bf16 output, pipetrain's the fp32 one)
    and e3 on the row sum sum(P g) (autocast rounds it to bf16 before the rest). round_sum
    (the emulation of autocast) rounds the row sum; the row sums are left in holder["sum"]."""

    @staticmethod
    def forward(ctx, s, e2, e3, round_sum, holder):
        P = torch.softmax(s, dim=-1)
        ctx.save_for_backward(P, e2, e3)
        ctx.round_sum, ctx.holder = round_sum, holder
        return P

    @staticmethod
    def backward(ctx, g):
        P, e2, e3 = ctx.saved_tensors
        Pb = P + e2
        rowsum = (Pb * g).sum(-1, keepdim=True)
        if ctx.round_sum:
            rowsum = rowsum + (rbf64(rowsum) - rowsum).detach()
        ctx.holder["sum"] = rowsum.detach()
        return Pb * (g - (rowsum + e3)), None, None, None, None


class Site:
    def __init__(self, name, ef, eb, vmag, ac, pt, pt_bmag):
        self.name, self.ef, self.eb, self.vmag, self.ac, self.pt, self.pt_bmag = name, ef, eb, vmag, ac, pt, pt_bmag
        self.gmag = None


class Emu:
    """exact: no rounding at all (the float64 reference). plain: no sites (fast forward for
    designing the data). rounds = "ac" or "pt": that side's roundings applied (in float64, so
    an implementation's float32 value may round the other way near a tie): an emulation of the
    side, to confirm the model. Otherwise the shared roundings are applied and sites recorded."""

    def __init__(self, exact=False, plain=False, rounds=None):
        self.exact, self.plain, self.rounds = exact, plain, rounds
        self.sites = []
        self.watch = {}  # name -> tensor: relu inputs ("relu:...") whose margins are checked

    def shared(self, t):
        """A stored float32 value that both implementations round to bf16 identically before a
        matrix kernel uses it: rounded here, in the reference (the gradient passes unchanged)."""
        return t if self.exact else t + (rbf(t) - t.detach())

    def site(self, t, name, ac="", pt="", pt_bmag=None, pt_bdelta=None):
        """ac, pt: "f" the implementation rounds this value, "b" it rounds the gradient flowing into
        it. pt_bmag replaces |gradient| as the magnitude of pipetrain's gradient perturbation, whose
        exact value is pt_bdelta (both for a bias gradient summed from an unrounded dy)."""
        if self.exact or self.plain:
            return t
        if self.rounds:
            flags = ac if self.rounds == "ac" else pt
            if "f" in flags:
                t = t + (rbf64(t) - t).detach()
            if "b" in flags:
                t = _AddGrad.apply(t, pt_bdelta) if self.rounds == "pt" and pt_bdelta is not None else _RoundGrad.apply(t)
            return t
        ef = torch.zeros_like(t, requires_grad=True)
        eb = torch.zeros_like(t, requires_grad=True)
        self.sites.append(Site(name, ef, eb, t.detach().abs(), ac, pt, pt_bmag))
        return _Site.apply(t, ef, eb)

    def softmax(self, s, name, ac="", pt=""):
        """Softmax over the last dimension. ac/pt: "f" that side's backward reads the output
        rounded, "s" it rounds the row sum of its backward."""
        if self.exact or self.plain:
            return F.softmax(s, dim=-1)
        P = F.softmax(s, dim=-1).detach()
        rows = torch.zeros(P.shape[:-1] + (1,), dtype=D64)
        if self.rounds:
            flags = ac if self.rounds == "ac" else pt
            return _SoftmaxReadsP.apply(s, rbf64(P) - P if "f" in flags else torch.zeros_like(P), rows, "s" in flags, {})
        e2 = torch.zeros_like(P, requires_grad=True)
        e3 = torch.zeros_like(rows, requires_grad=True)
        holder = {}
        self.sites.append(Site(name + ".reads_P", e2, torch.zeros_like(P, requires_grad=True), P.abs(),
                               "f" if "f" in ac else "", "f" if "f" in pt else "", None))
        rowsum = Site(name + ".row_sum", e3, torch.zeros_like(rows, requires_grad=True), None,
                      "f" if "s" in ac else "", "f" if "s" in pt else "", None)
        rowsum.holder = holder  # its magnitude, the row sums, is known after the backward (run_emu)
        self.sites.append(rowsum)
        return _SoftmaxReadsP.apply(s, e2, e3, False, holder)

    def relu(self, z, name):
        self.watch["relu:" + name] = z
        return F.relu(z)


def e_linear(e, xr, W, b, name, out_ac, out_pt, inner_pt, dy_raw=None, inner_ac="", db_rounded=False):
    """y = xr W^T + b. Both round W (identically); autocast returns dW, db as bf16 and rounds
    the bias, and its output is a bf16 tensor (out_ac). inner_pt: pipetrain rounds the output
    gradient for its two GEMMs but sums the unrounded one into db; with db_rounded it sums the
    rounded one (the gradient a transformer block keeps packed in bf16). dy_raw = (dy, dims): the
    output gradient is the stored dy, rounded identically by both for the GEMMs; pipetrain's db
    sums the unrounded dy over dims, off the reference by sum(dy - bf16(dy)), at most u sum|dy|.
    inner_ac = "f": autocast rounds the product before adding the bias (then rounds again)."""
    pt_db_mag = pt_db_delta = None
    if dy_raw is not None and b is not None:
        dy, dims = dy_raw
        pt_db_mag, pt_db_delta = dy.abs().sum(dims), (dy - rbf(dy)).sum(dims)
    Wr = e.site(e.shared(W), name + ".weight", ac="b")
    z = xr @ Wr.t()
    if inner_pt or inner_ac:
        z = e.site(z, name + ".gemm", ac=inner_ac, pt="" if db_rounded else inner_pt)
    if b is not None:
        z = z + e.site(b, name + ".bias", ac="fb", pt="b" if pt_db_mag is not None else "", pt_bmag=pt_db_mag,
                       pt_bdelta=pt_db_delta)
    if db_rounded and inner_pt:
        z = e.site(z, name + ".dy", pt=inner_pt)  # the gradient rounded before both GEMMs and db
    return e.site(z, name + ".out", ac=out_ac, pt=out_pt)


def e_conv(e, xr, W, b, name, stride, padding, out_ac, out_pt, inner_pt):
    """The convolution as e_linear (pipetrain's conv db is the sum of the rounded dy: no override)."""
    Wr = e.site(e.shared(W), name + ".weight", ac="b")
    z = F.conv2d(xr, Wr, None, stride=stride, padding=padding)
    if inner_pt:
        z = e.site(z, name + ".gemm", pt=inner_pt)
    if b is not None:
        z = z + e.site(b, name + ".bias", ac="fb").reshape(1, -1, 1, 1)
    return e.site(z, name + ".out", ac=out_ac, pt=out_pt)


def causal_mask(T):
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def e_attention(e, a, Win, bin_, Wout, bout, H, name, out_ac, out_pt, out_inner_pt, dy_raw=None, out_db_rounded=False):
    """nn.MultiheadAttention (batch_first, causal mask) on a [n, T, D], whose sites the caller set.
    Autocast (F.multi_head_attention_forward): in_proj linear -> bf16 q, k, v (two roundings,
    see below); q / sqrt(dh)
    (exact: dh is a power of 4 here); baddbmm -> bf16 scores; softmax of bf16 -> bf16 P; bmm
    -> bf16 head outputs; out_proj linear -> bf16. Every bf16 tensor's gradient is bf16 too;
    the softmax backward reads the bf16 P and rounds its row sum sum(P dP) to bf16.
    Pipetrain: q, k, v rounded for the score and P.V products (their gradient for the in_proj
    GEMMs); the scores and the softmax in fp32; P rounded once after the softmax and read so by
    P.V, dV and the softmax backward (which sums in fp32); the score gradient
    rounded for dQ, dK; the head outputs rounded for out_proj, their gradient for dP, dV."""
    n, T, D = a.shape
    dh = D // H
    assert dh in (1, 4, 16, 64), "1/sqrt(dh) must be a power of 2 (then q / sqrt(dh) is exact in bf16)"
    # MultiheadAttention(batch_first=True) hands in_proj its input transposed: F.linear of a
    # non-contiguous 3-D input rounds the product to bf16, then adds the bias in bf16
    qkv = e_linear(e, a, Win, bin_, name + ".in_proj", out_ac="fb", out_pt="f", inner_pt="b", inner_ac="f",
                   db_rounded=True)
    q, k, v = [t.reshape(n, T, H, dh).permute(0, 2, 1, 3) for t in qkv.split(D, dim=-1)]
    s = (q / math.sqrt(dh)) @ k.transpose(-2, -1)
    s = e.site(s, name + ".scores", ac="fb", pt="b")
    P = e.softmax(s.masked_fill(causal_mask(T), float("-inf")), name + ".softmax_backward", ac="fs", pt="f")
    P = e.site(P, name + ".probs", ac="fb", pt="f")
    O = (P @ v).permute(0, 2, 1, 3).reshape(n, T, D)
    O = e.site(O, name + ".heads", ac="fb", pt="fb")
    return e_linear(e, O, Wout, bout, name + ".out_proj", out_ac=out_ac, out_pt=out_pt, inner_pt=out_inner_pt,
                    dy_raw=dy_raw, db_rounded=out_db_rounded)


# ---------------------------------------------------------------------------------------
# designing data away from kinks and ties

def kink_offset(vals):
    """The middle of the widest gap between consecutive sorted values in the middle half: a relu
    of (vals - offset) is active on part of the batch, and no value sits near its kink."""
    v = np.sort(np.asarray(vals, dtype=np.float64).reshape(-1))
    m = len(v)
    lo, hi = m // 4, max(m // 4 + 1, (3 * m) // 4)
    hi = min(hi, m - 1)
    k = lo + int(np.argmax(v[lo + 1:hi + 1] - v[lo:hi]))
    return 0.5 * (v[k] + v[k + 1])


def per_unit_offsets(z, unit_dim):
    """kink_offset of each unit (feature or channel) over every other dimension."""
    zz = z.detach().movedim(unit_dim, 0).reshape(z.shape[unit_dim], -1).numpy()
    return torch.tensor([kink_offset(r) for r in zz], dtype=D64)


def rand_t(shape, seed, lo, hi):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=D64) * (hi - lo) + lo).float()


def randn_t(shape, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=D64) * scale + shift).float()


def weight(shape, seed):
    """U(+-1.5/sqrt(fan_in)): O(1) activations through every layer."""
    fan_in = int(np.prod(shape[1:]))
    b = 1.5 / math.sqrt(fan_in)
    return rand_t(shape, seed, -b, b)


# ---------------------------------------------------------------------------------------
# cases: the emulation (float64, sites), the autocast run (float32 modules), the inputs

class Case:
    """name; attrs (type, deck, shape attributes ...); x (float32; token ids as floats);
    x_grad (dx is a quantity); params (float32 list, pipetrain order); dy (float32 or None for a
    loss); labels; loss_scale; k32 (longest accumulation); emulate(e, x64, p64) -> y;
    dy_shared (both round the stored dy before any use that matters, see e_linear);
    autocast() -> (y, dx, dparams) float32 tensors."""

    def __init__(self, **kw):
        self.labels = None
        self.loss_scale = None
        self.dy = None
        self.dy_shared = False
        self.pool_windows = []  # (relu watch name, kernel): max pooling of relu(watch) with this window
        self.__dict__.update(kw)


def grads_in(y, inputs, dy, create_graph):
    return torch.autograd.grad(y, inputs, dy, create_graph=create_graph, allow_unused=True)


def run_emu(case, e):
    x = case.x.double().requires_grad_(case.x_grad)
    ps = [p.double().requires_grad_(True) for p in case.params]
    y = case.emulate(e, x, ps)
    if case.dy is None:
        dy = torch.full_like(y, case.loss_scale)
    else:
        dy = case.dy.double()
        if case.dy_shared:
            dy = e.shared(dy)
    inputs = ([x] if case.x_grad else []) + ps + [s.ef for s in e.sites]
    g = grads_in(y, inputs, dy, create_graph=bool(e.sites))
    k = 1 if case.x_grad else 0
    dx = g[0] if case.x_grad else torch.zeros(case.x.shape, dtype=D64)
    dparams = torch.cat([(gp if gp is not None else torch.zeros_like(p)).reshape(-1) for gp, p in zip(g[k:k + len(ps)], ps)])
    for s, gs in zip(e.sites, g[k + len(ps):]):
        s.gmag = (gs if gs is not None else torch.zeros_like(s.ef)).detach().abs()
        if s.vmag is None:
            s.vmag = s.holder["sum"].abs()
    return y, dx, dparams


def bounds(case):
    """(values, B_ac, B_pt, M) per quantity (y, dx, dparams, and every relu watch), from the
    row-by-row Jacobian with respect to every site's two perturbations."""
    e = Emu()
    y, dx, dparams = run_emu(case, e)
    qs = [("y", y.reshape(-1)), ("dx", dx.reshape(-1)), ("dparams", dparams)]
    qs += [(k, v.reshape(-1)) for k, v in e.watch.items()]
    Q = torch.cat([v for _, v in qs])
    wrt = [s.ef for s in e.sites] + [s.eb for s in e.sites]
    ns = len(e.sites)
    ac_f = torch.tensor([1.0 if "f" in s.ac else 0.0 for s in e.sites], dtype=D64)
    ac_b = torch.tensor([1.0 if "b" in s.ac else 0.0 for s in e.sites], dtype=D64)
    pt_f = torch.tensor([1.0 if "f" in s.pt else 0.0 for s in e.sites], dtype=D64)
    pt_b = torch.tensor([1.0 if "b" in s.pt else 0.0 for s in e.sites], dtype=D64)
    B_ac, B_pt, M = (torch.zeros(len(Q), dtype=D64) for _ in range(3))
    for i in range(len(Q)):
        if not Q[i].requires_grad:
            continue
        g = torch.autograd.grad(Q[i], wrt, retain_graph=True, allow_unused=True)
        cf = torch.zeros(ns, dtype=D64)
        cb = torch.zeros(ns, dtype=D64)
        cbp = torch.zeros(ns, dtype=D64)
        for j, s in enumerate(e.sites):
            gf, gb = g[j], g[ns + j]
            if gf is not None:
                cf[j] = (gf.detach().abs() * s.vmag).sum()
            if gb is not None:
                a = gb.detach().abs()
                cb[j] = (a * s.gmag).sum()
                cbp[j] = (a * s.pt_bmag).sum() if s.pt_bmag is not None else cb[j]
        B_ac[i] = U * float((ac_f * cf + ac_b * cb).sum())
        B_pt[i] = U * float((pt_f * cf + pt_b * cbp).sum())
        M[i] = float((cf + cb).sum())
    out, at = {}, 0
    for name, v in qs:
        m = v.numel()
        out[name] = (v.detach(), B_ac[at:at + m], B_pt[at:at + m], M[at:at + m])
        at += m
    return out, e


def margins_ok(case, b):
    """The first-order bound holds only away from relu kinks and pooling ties (see the docstring).
    Each implementation X is within dev_X = (1 + 1/16) B_X + b32 of the reference: no relu input
    may be within max(dev_ac, dev_pt) of 0, and in each pooling window the maximum must lead every
    other value v_j by more than dev(max) + dev(v_j) (a relu output of 0 is exact in both)."""
    ok = True
    for name, (v, bac, bpt, m) in b.items():
        if not name.startswith("relu:"):
            continue
        dev = SECOND_ORDER * torch.maximum(bac, bpt) + case.k32 * U32 * m
        worst = float((dev / v.abs().clamp_min(1e-300)).max())
        if worst >= 1.0:
            print(f"  {case.name} (seed {case.seed}): relu input {name[5:]} within its bound of the kink "
                  f"(worst ratio {worst:.3g})")
            ok = False
    for name, kernel in case.pool_windows:
        v, bac, bpt, m = b["relu:" + name]
        shape = case.watch_shapes[name]
        dev = SECOND_ORDER * torch.maximum(bac, bpt) + case.k32 * U32 * m
        dev = torch.where(v > 0, dev, torch.zeros_like(dev)).reshape(shape)
        r = F.relu(v.reshape(shape))
        n, C = shape[0], shape[1]
        win = F.unfold(r, kernel, stride=kernel).reshape(n, C, kernel * kernel, -1)
        dw = F.unfold(dev, kernel, stride=kernel).reshape(n, C, kernel * kernel, -1)
        top, at = win.max(dim=2, keepdim=True)
        lead = top - win - dw.gather(2, at) - dw
        lead = lead.scatter(2, at, float("inf"))  # the maximum against itself
        bad = (top.squeeze(2) > 0) & (lead.min(dim=2).values <= 0)
        if bad.any():
            print(f"  {case.name} (seed {case.seed}): {int(bad.sum())} pooling windows of {name} with a near tie")
            ok = False
    return ok


# ---- the cases ------------------------------------------------------------------------

def deck_text(data_shape, classes, layers, tail=True):
    """A deck: the [data] section (not used by the test's Model, which gets the fixture's shape)
    and the layers; a flatten + linear + loss tail unless the last layer is a loss."""
    o = "[data]\nsource = \"synthetic\"\nshape = [" + ", ".join(str(s) for s in data_shape) + "]\n"
    o += f"classes = {classes}\n\n[model]\n"
    for typ, keys in layers:
        o += f"[[model.layers]]\ntype = \"{typ}\"\n" + "".join(f"{k} = {v}\n" for k, v in keys)
    if tail:
        o += f"[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = {classes}\n"
        o += "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n"
    return o


def toml_bool(b):
    return "true" if b else "false"


def linear_case(seed):
    n, fin, fout = 16, 24, 20
    x = randn_t((n, fin), seed)
    W, b = weight((fout, fin), seed + 1), rand_t((fout,), seed + 2, -0.5, 0.5)
    dy = randn_t((n, fout), seed + 3)

    def emulate(e, x64, p):
        xr = e.site(e.shared(x64), "x", ac="b")  # autocast's dx is the gradient of its bf16 copy of x
        return e_linear(e, xr, p[0], p[1], "linear", out_ac="f", out_pt="", inner_pt="",
                        dy_raw=(dy.double(), 0))

    def autocast():
        m = nn.Linear(fin, fout)
        with torch.no_grad():
            m.weight.copy_(W), m.bias.copy_(b)
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            # a non-leaf input, as a block's input is in training: autocast caches the bf16 cast
            # of a leaf that requires grad, and both convolutions' input gradients would then be
            # summed in bf16 (one more rounding than training makes)
            y = m(xx.clone())
        y.backward(dy)
        return y, xx.grad, mf.flat(m.weight.grad, m.bias.grad)

    deck = deck_text([fin], 2, [("linear", [("out", fout), ("bias", "true")])])
    return Case(name="linear", attrs=dict(type="linear", rank=1, c=fin, h=1, w=1), deck=deck, x=x, x_grad=True,
                params=[W, b], dy=dy, dy_shared=True, k32=max(fin, n), emulate=emulate, autocast=autocast)


def conv_case(seed, name, n, cin, hw, cout, k, stride, pad, bias):
    x = randn_t((n, cin, hw, hw), seed)
    W = weight((cout, cin, k, k), seed + 1)
    b = rand_t((cout,), seed + 2, -0.5, 0.5) if bias else None
    ho = (hw + 2 * pad - k) // stride + 1
    dy = randn_t((n, cout, ho, ho), seed + 3)

    def emulate(e, x64, p):
        xr = e.site(e.shared(x64), "x", ac="b")
        return e_conv(e, xr, p[0], p[1] if bias else None, "conv", stride, pad, out_ac="f", out_pt="", inner_pt="")

    def autocast():
        m = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=bias)
        with torch.no_grad():
            m.weight.copy_(W)
            if bias:
                m.bias.copy_(b)
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            # a non-leaf input, as a block's input is in training: autocast caches the bf16 cast
            # of a leaf that requires grad, and both convolutions' input gradients would then be
            # summed in bf16 (one more rounding than training makes)
            y = m(xx.clone())
        y.backward(dy)
        return y, xx.grad, mf.flat(m.weight.grad, m.bias.grad if bias else None)

    deck = deck_text([cin, hw, hw], 2, [("conv2d", [("channels", cout), ("kernel", k), ("stride", stride),
                                                     ("padding", pad), ("bias", toml_bool(bias))])])
    return Case(name=name, attrs=dict(type="conv2d", rank=3, c=cin, h=hw, w=hw), deck=deck, x=x, x_grad=True,
                params=[W] + ([b] if bias else []), dy=dy, dy_shared=True,
                k32=max(cin * k * k, cout * k * k, n * ho * ho), emulate=emulate, autocast=autocast)


def mha_params(D, seed):
    return [weight((3 * D, D), seed), rand_t((3 * D,), seed + 1, -0.2, 0.2), weight((D, D), seed + 2),
            rand_t((D,), seed + 3, -0.2, 0.2)]


def load_mha(attn, p):
    with torch.no_grad():
        attn.in_proj_weight.copy_(p[0]), attn.in_proj_bias.copy_(p[1])
        attn.out_proj.weight.copy_(p[2]), attn.out_proj.bias.copy_(p[3])


def attention_case(seed):
    n, T, D, H = 4, 10, 16, 4
    x = randn_t((n, T, D), seed)
    p = mha_params(D, seed + 1)
    dy = randn_t((n, T, D), seed + 9)

    def emulate(e, x64, q):
        a = e.site(e.shared(x64), "x", ac="b")
        return e_attention(e, a, q[0], q[1], q[2], q[3], H, "attn", out_ac="f", out_pt="", out_inner_pt="",
                           dy_raw=(dy.double(), (0, 1)))

    def autocast():
        m = nn.MultiheadAttention(D, H, batch_first=True)
        load_mha(m, p)
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(xx, xx, xx, attn_mask=causal_mask(T), need_weights=False)[0]
        y.backward(dy)
        return y, xx.grad, mf.flat(m.in_proj_weight.grad, m.in_proj_bias.grad, m.out_proj.weight.grad,
                                   m.out_proj.bias.grad)

    deck = deck_text([T * D], 2, [("attention", [("heads", H)])])
    return Case(name="attention", attrs=dict(type="attention", rank=2, c=T, h=D, w=1), deck=deck, x=x, x_grad=True,
                params=p, dy=dy, dy_shared=True, k32=max(3 * D, n * T, T), emulate=emulate, autocast=autocast)


class Block(nn.Module):
    """The pre-LN block of docs/MODELS.md (as tools/make_fixtures.py's), float32."""

    def __init__(self, D, H, r):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, r * D), nn.GELU(), nn.Linear(r * D, D))

    def forward(self, x):
        a = self.ln1(x)
        h = x + self.attn(a, a, a, attn_mask=causal_mask(x.shape[1]), need_weights=False)[0]
        return h + self.mlp(self.ln2(h))


def block_case(seed):
    n, T, D, H, r = 4, 10, 16, 4, 2
    Fd = r * D
    x = randn_t((n, T, D), seed)
    ln = lambda s: [rand_t((D,), s, 0.7, 1.3), rand_t((D,), s + 1, -0.2, 0.2)]  # noqa: E731
    p = ln(seed + 1) + mha_params(D, seed + 3) + ln(seed + 7) + [weight((Fd, D), seed + 9),
                                                                 rand_t((Fd,), seed + 10, -0.2, 0.2),
                                                                 weight((D, Fd), seed + 11),
                                                                 rand_t((D,), seed + 12, -0.2, 0.2)]
    dy = randn_t((n, T, D), seed + 13)

    def emulate(e, x64, q):
        xs = e.site(x64, "x")  # float32 in both: a site for the float32 scale only
        a1 = F.layer_norm(xs, (D,), q[0], q[1], 1e-5)
        a1 = e.site(a1, "ln1", ac="fb", pt="f")  # autocast casts it for in_proj (and rounds the cast's gradient)
        m = e_attention(e, a1, q[2], q[3], q[4], q[5], H, "attn", out_ac="fb", out_pt="", out_inner_pt="b",
                        out_db_rounded=True)
        h = e.site(xs + m, "h")
        b2 = e.site(F.layer_norm(h, (D,), q[6], q[7], 1e-5), "ln2", ac="fb", pt="f")
        # both keep fc1's output as bf16 (the GELU's input; its gradient pipetrain rounds for
        # fc1's GEMMs and bias gradient) and compute the GELU and its derivative from it
        f = e_linear(e, b2, q[8], q[9], "fc1", out_ac="fb", out_pt="f", inner_pt="b", db_rounded=True)
        g = e.site(F.gelu(f), "gelu", ac="fb", pt="f")  # autocast: gelu of bf16 is bf16
        mo = e_linear(e, g, q[10], q[11], "fc2", out_ac="fb", out_pt="", inner_pt="b", db_rounded=True)
        return h + mo

    def autocast():
        m = Block(D, H, r)
        with torch.no_grad():
            for t, v in zip([m.ln1.weight, m.ln1.bias], p[0:2]):
                t.copy_(v)
            load_mha(m.attn, p[2:6])
            for t, v in zip([m.ln2.weight, m.ln2.bias, m.mlp[0].weight, m.mlp[0].bias, m.mlp[2].weight, m.mlp[2].bias],
                            p[6:]):
                t.copy_(v)
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            # a non-leaf input, as a block's input is in training: autocast caches the bf16 cast
            # of a leaf that requires grad, and both convolutions' input gradients would then be
            # summed in bf16 (one more rounding than training makes)
            y = m(xx.clone())
        y.backward(dy)
        a = m.attn
        return y, xx.grad, mf.flat(m.ln1.weight.grad, m.ln1.bias.grad, a.in_proj_weight.grad, a.in_proj_bias.grad,
                                   a.out_proj.weight.grad, a.out_proj.bias.grad, m.ln2.weight.grad, m.ln2.bias.grad,
                                   m.mlp[0].weight.grad, m.mlp[0].bias.grad, m.mlp[2].weight.grad, m.mlp[2].bias.grad)

    deck = deck_text([T * D], 2, [("transformer_block", [("heads", H), ("mlp_ratio", r)])])
    return Case(name="transformer_block", attrs=dict(type="transformer_block", rank=2, c=T, h=D, w=1), deck=deck, x=x,
                x_grad=True, params=p, dy=dy, k32=max(3 * D, Fd, n * T, T), emulate=emulate, autocast=autocast)


def lm_head_case(seed):
    n, T, D, V = 3, 8, 16, 24
    x = randn_t((n, T, D), seed)
    p = [rand_t((D,), seed + 1, 0.7, 1.3), rand_t((D,), seed + 2, -0.2, 0.2), weight((V, D), seed + 3),
         rand_t((V,), seed + 4, -0.5, 0.5)]
    g = torch.Generator().manual_seed(seed + 5)
    labels = torch.randint(0, V, (n, T), generator=g)

    def emulate(e, x64, q):
        xs = e.site(x64, "x")
        z = e.site(F.layer_norm(xs, (D,), q[0], q[1], 1e-5), "norm", ac="fb", pt="f")
        logits = e_linear(e, z, q[2], q[3], "head", out_ac="fb", out_pt="f", inner_pt="b")
        tok = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").reshape(n, T)
        return tok.mean(1, keepdim=True)

    def autocast():
        norm, lin = nn.LayerNorm(D), nn.Linear(D, V)
        with torch.no_grad():
            norm.weight.copy_(p[0]), norm.bias.copy_(p[1]), lin.weight.copy_(p[2]), lin.bias.copy_(p[3])
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = lin(norm(xx))
            tok = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").reshape(n, T)
        y = tok.mean(1, keepdim=True)
        y.mean().backward()  # the mean token loss: pipetrain's loss_scale 1/n over per-sample means
        return y, xx.grad, mf.flat(norm.weight.grad, norm.bias.grad, lin.weight.grad, lin.bias.grad)

    deck = deck_text([T * D], V, [("lm_head", [("bias", "true")])], tail=False)
    return Case(name="lm_head", attrs=dict(type="lm_head", rank=2, c=T, h=D, w=1, classes=V, loss_scale=1.0 / n), deck=deck,
                x=x, x_grad=True, params=p, labels=labels.reshape(-1), loss_scale=1.0 / n, k32=max(D, V, n * T),
                emulate=emulate, autocast=autocast)


def embedding_case(seed):
    """Run through a one-layer Stage with bf16 activations: pipetrain rounds the output, autocast
    leaves embedding in float32 (not on its bf16 list). The stored dy is not rounded (the Stage
    rounds input gradients, not the incoming output gradient), so dparams are float32 on both."""
    n, T, V, D = 3, 6, 11, 8
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (n, T), generator=g)
    tokens[1, 2] = tokens[0, 2] = tokens[2, 5]  # a repeated token: the scatter-add sums rows
    p = [randn_t((V, D), seed + 1), randn_t((T, D), seed + 2, 0.5)]
    dy = randn_t((n, T, D), seed + 3)

    def emulate(e, x64, q):
        y = q[0][tokens] + q[1][torch.arange(T)]
        return e.site(y, "out", pt="f")

    def autocast():
        wte, wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        with torch.no_grad():
            wte.weight.copy_(p[0]), wpe.weight.copy_(p[1])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = wte(tokens) + wpe(torch.arange(T))
        y.backward(dy)
        return y, torch.zeros(n, T), mf.flat(wte.weight.grad, wpe.weight.grad)

    deck = deck_text([T], V, [("embedding", [("dim", D)])])
    return Case(name="embedding", attrs=dict(type="embedding", rank=1, tokens=1, c=T, h=1, w=1, classes=V, stage=1),
                deck=deck, x=tokens.float(), x_grad=False, params=p, dy=dy, k32=n * T, emulate=emulate, autocast=autocast)


class BasicBlock(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.downsample = None
        if stride != 1 or cin != c:
            self.downsample = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


def residual_case(seed, name, n, cin, c, hw, stride):
    proj = stride != 1 or cin != c
    ho = (hw + 2 - 3) // stride + 1
    x = randn_t((n, cin, hw, hw), seed)
    dy = randn_t((n, c, ho, ho), seed + 1)
    W1, W2 = weight((c, cin, 3, 3), seed + 2), weight((c, c, 3, 3), seed + 3)
    g1, g2 = rand_t((c,), seed + 4, 0.7, 1.3), rand_t((c,), seed + 5, 0.7, 1.3)
    Wp, gp, bp = weight((c, cin, 1, 1), seed + 6), rand_t((c,), seed + 7, 0.7, 1.3), rand_t((c,), seed + 8, -0.5, 0.5)
    b1 = torch.zeros(c)
    b2 = torch.zeros(c)

    def bn(t, g, b):
        return F.batch_norm(t, None, None, g, b, training=True, eps=1e-5)

    def forward(e, x64, q, stop=None):
        """stop="bn1": the batch-norm-1 output before its shift; "sum": the pre-relu sum before bn2's shift."""
        W1_, g1_, b1_, W2_, g2_, b2_ = q[:6]
        xr = e.shared(x64)
        c1 = e_conv(e, e.site(xr, "x.conv1", ac="b"), W1_, None, "conv1", stride, 1, out_ac="fb", out_pt="", inner_pt="b")
        t1 = bn(c1, g1_, b1_)
        if stop == "bn1":
            return t1
        r1 = e.site(e.relu(t1, "bn1"), "relu1", ac="fb", pt="f")  # rounding commutes with relu
        c2 = e_conv(e, r1, W2_, None, "conv2", 1, 1, out_ac="fb", out_pt="", inner_pt="b")
        t2 = bn(c2, g2_, b2_)
        if proj:
            t2 = e.site(t2, "bn2", ac="f")  # bf16 + bf16 -> bf16 sum: its gradient is rounded once, at the sum
            cp = e_conv(e, e.site(xr, "x.downsample", ac="b"), q[6], None, "downsample.0", stride, 0, out_ac="fb",
                        out_pt="", inner_pt="b")
            tp = e.site(bn(cp, q[7], q[8]), "downsample.1", ac="f")
            s = e.site(t2 + tp, "sum", ac="fb")  # y = relu(sum) is bf16: autocast rounds the stored dy too
        else:
            t2 = e.site(t2, "bn2", ac="fb")  # bf16 + float32 x -> float32 sum
            s = t2 + e.site(x64, "x.identity")
        if stop == "sum":
            return s
        return e.relu(s, "sum")

    # the shifts: bn1's and bn2's put the kinks of both relus in the widest gaps of their inputs
    ps = [W1, g1, b1, W2, g2, b2] + ([Wp, gp, bp] if proj else [])
    with torch.no_grad():
        pd = [t.double() for t in ps]
        b1 = (-per_unit_offsets(forward(Emu(plain=True), x.double(), pd, "bn1"), 1)).float()
        pd[2] = b1.double()
        b2 = (-per_unit_offsets(forward(Emu(plain=True), x.double(), pd, "sum"), 1)).float()
    ps[2], ps[5] = b1, b2

    def emulate(e, x64, q):
        return forward(e, x64, q)

    def autocast():
        m = BasicBlock(cin, c, stride)
        m.train()
        tensors = [m.conv1.weight, m.bn1.weight, m.bn1.bias, m.conv2.weight, m.bn2.weight, m.bn2.bias]
        if proj:
            tensors += [m.downsample[0].weight, m.downsample[1].weight, m.downsample[1].bias]
        with torch.no_grad():
            for t, v in zip(tensors, ps):
                t.copy_(v.reshape(t.shape))
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            # a non-leaf input, as a block's input is in training: autocast caches the bf16 cast
            # of a leaf that requires grad, and both convolutions' input gradients would then be
            # summed in bf16 (one more rounding than training makes)
            y = m(xx.clone())
        y.backward(dy)
        return y, xx.grad, mf.flat(*[t.grad for t in tensors])

    deck = deck_text([cin, hw, hw], 2, [("residual_block", [("channels", c), ("stride", stride)])])
    return Case(name=name, attrs=dict(type="residual_block", rank=3, c=cin, h=hw, w=hw), deck=deck, x=x, x_grad=True,
                params=ps, dy=dy, dy_shared=False, k32=max(9 * c, n * ho * ho), emulate=emulate, autocast=autocast)


def chain_autocast(m, mods, ps, x, labels):
    """A chain's loss per sample, its input gradient and its parameter gradients under autocast:
    the modules with parameters (mods) take ps[2l] and ps[2l+1] as weight and bias; the loss is
    averaged over the batch."""
    with torch.no_grad():
        for l, mod in enumerate(mods):
            mod.weight.copy_(ps[2 * l]), mod.bias.copy_(ps[2 * l + 1])
    xx = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.cross_entropy(m(xx), labels, reduction="none").reshape(len(labels), 1)
    y.mean().backward()
    return y, xx.grad, mf.flat(*[t for mod in mods for t in (mod.weight.grad, mod.bias.grad)])


def mlp_case(seed):
    """A chain through a Stage with bf16 activations: linear, relu, linear, relu, linear, loss."""
    n, fin, h, classes = 16, 24, 32, 10
    x = randn_t((n, fin), seed)
    g = torch.Generator().manual_seed(seed + 1)
    labels = torch.randint(0, classes, (n,), generator=g)
    W = [weight((h, fin), seed + 2), weight((h, h), seed + 3), weight((classes, h), seed + 4)]
    B = [torch.zeros(h), torch.zeros(h), rand_t((classes,), seed + 5, -0.2, 0.2)]

    def forward(e, x64, q, stop=None):
        xr = e.site(e.shared(x64), "x", ac="b", pt="b")  # dx: a bf16 tensor in autocast, rounded by the Stage
        hcur = xr
        for l in range(3):
            z = e_linear(e, hcur, q[2 * l], q[2 * l + 1], f"fc{l}", out_ac="f" if l < 2 else "fb",
                         out_pt="f" if l < 2 else "fb", inner_pt="")
            if stop == l:
                return z
            if l < 2:
                hcur = e.site(e.relu(z, f"fc{l}"), f"relu{l}", ac="b", pt="b")
            else:
                hcur = z
        return F.cross_entropy(hcur, labels, reduction="none").reshape(n, 1)

    ps = [W[0], B[0], W[1], B[1], W[2], B[2]]
    with torch.no_grad():
        for l in range(2):
            pd = [t.double() for t in ps]
            z = forward(Emu(plain=True), x.double(), pd, stop=l)
            ps[2 * l + 1] = (-per_unit_offsets(z, 1)).float()

    def autocast():
        m = nn.Sequential(nn.Linear(fin, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, classes))
        return chain_autocast(m, [m[0], m[2], m[4]], ps, x, labels)

    deck = deck_text([fin], classes, [("linear", [("out", h)]), ("relu", []), ("linear", [("out", h)]), ("relu", []),
                                      ("linear", [("out", classes)]), ("softmax_cross_entropy", [])], tail=False)
    return Case(name="mlp", attrs=dict(type="chain", rank=1, c=fin, h=1, w=1, classes=classes, loss_scale=1.0 / n,
                                       stage=1), deck=deck, x=x, x_grad=True, params=ps, labels=labels,
                loss_scale=1.0 / n, k32=max(fin, h, n, classes), emulate=lambda e, x64, q: forward(e, x64, q),
                autocast=autocast)


def cnn_case(seed):
    """conv 2 k3 p1, relu, maxpool 2, conv 4 k3 p1, relu, maxpool 2, flatten, linear 136, loss on
    [1, 8, 8] through a Stage with bf16 activations. Few pooling windows (96), so that a seed
    with clear maxima exists; 136 classes, so that the head's products exceed 16^3 (above)."""
    n, hw, c1, c2, classes = 2, 8, 2, 4, 136
    x = randn_t((n, 1, hw, hw), seed)
    g = torch.Generator().manual_seed(seed + 1)
    labels = torch.randint(0, classes, (n,), generator=g)
    ps = [weight((c1, 1, 3, 3), seed + 2), torch.zeros(c1), weight((c2, c1, 3, 3), seed + 3), torch.zeros(c2),
          weight((classes, c2 * 4), seed + 4), rand_t((classes,), seed + 5, -0.2, 0.2)]

    def forward(e, x64, q, stop=None):
        xr = e.site(e.shared(x64), "x", ac="b", pt="b")
        z1 = e_conv(e, xr, q[0], q[1], "conv0", 1, 1, out_ac="f", out_pt="f", inner_pt="")
        if stop == 0:
            return z1
        p1 = e.site(F.max_pool2d(e.relu(z1, "conv0"), 2), "pool0", ac="b", pt="b")
        z2 = e_conv(e, p1, q[2], q[3], "conv1", 1, 1, out_ac="f", out_pt="f", inner_pt="")
        if stop == 1:
            return z2
        p2 = e.site(F.max_pool2d(e.relu(z2, "conv1"), 2).reshape(n, -1), "pool1", ac="b", pt="b")
        z3 = e_linear(e, p2, q[4], q[5], "fc", out_ac="fb", out_pt="fb", inner_pt="")
        return F.cross_entropy(z3, labels, reduction="none").reshape(n, 1)

    with torch.no_grad():
        for l in range(2):
            pd = [t.double() for t in ps]
            z = forward(Emu(plain=True), x.double(), pd, stop=l)
            ps[2 * l + 1] = (-per_unit_offsets(z, 1)).float()

    def autocast():
        m = nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 3, padding=1),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c2 * 4, classes))
        return chain_autocast(m, [m[0], m[3], m[7]], ps, x, labels)

    deck = deck_text([1, hw, hw], classes, [
        ("conv2d", [("channels", c1), ("kernel", 3), ("padding", 1)]), ("relu", []),
        ("maxpool2d", [("kernel", 2)]),
        ("conv2d", [("channels", c2), ("kernel", 3), ("padding", 1)]), ("relu", []),
        ("maxpool2d", [("kernel", 2)]), ("flatten", []), ("linear", [("out", classes)]),
        ("softmax_cross_entropy", [])], tail=False)
    return Case(name="cnn", attrs=dict(type="chain", rank=3, c=1, h=hw, w=hw, classes=classes, loss_scale=1.0 / n, stage=1),
                deck=deck, x=x, x_grad=True, params=ps, labels=labels,
                loss_scale=1.0 / n, k32=max(9 * c1, n * hw * hw, c2 * 4, classes),
                emulate=lambda e, x64, q: forward(e, x64, q), autocast=autocast,
                pool_windows=[("conv0", 2), ("conv1", 2)],
                watch_shapes={"conv0": (n, c1, hw, hw), "conv1": (n, c2, hw // 2, hw // 2)})


# ---------------------------------------------------------------------------------------

def normwise(a, b, ref):
    return float((a - b).abs().max() / ref.abs().max().clamp_min(1e-300))


def build_and_write(case):
    y64, dx64, dp64 = run_emu(case, Emu(exact=True))
    b, _ = bounds(case)
    if not margins_ok(case, b):
        return None
    ac = [t.detach().double() for t in case.autocast()]
    quantities = {"y": ac[0].reshape(-1), "dx": ac[1].reshape(-1), "dparams": ac[2].reshape(-1)}
    f64 = {"y": y64.detach().reshape(-1), "dx": dx64.detach().reshape(-1), "dparams": dp64.detach()}
    # the two sides emulated: each side's roundings applied in float64
    emu = {}
    for side in ("ac", "pt"):
        y_, dx_, dp_ = run_emu(case, Emu(rounds=side))
        emu[side] = {"y": y_.detach().reshape(-1), "dx": dx_.detach().reshape(-1), "dparams": dp_.detach()}
    data = {"x": case.x, "params": torch.cat([p.reshape(-1) for p in case.params])}
    if case.dy is not None:
        data["dy"] = case.dy
    if case.labels is not None:
        data["labels"] = case.labels.to(torch.int64)
    report = []
    for q in ("y", "dx", "dparams"):
        ref, bac, bpt, m = b[q]
        b32 = case.k32 * U32 * m
        a = quantities[q]
        assert a.shape == ref.shape, (case.name, q, a.shape, ref.shape)
        # autocast within its own half of the model
        tol = SECOND_ORDER * bac + b32
        ratio = float(((a - ref).abs() / tol.clamp_min(1e-300)).max()) if a.numel() else 0.0
        assert ratio <= 1.0, f"{case.name} {q}: autocast outside its first-order bound (ratio {ratio:.3g})"
        # the emulation of autocast against autocast, relative to autocast's own error: the model
        # of where autocast rounds is right when this is small (ties that round the other way in
        # float32 than in float64 leave a little; float32 itself about 2^-20 of the scale)
        e_ac = normwise(a, f64[q], f64[q])
        e_emu = normwise(emu["ac"][q], a, f64[q])
        assert e_emu <= 0.25 * e_ac + 2.0 ** -20, f"{case.name} {q}: the emulation of autocast is off ({e_emu:.3g} vs {e_ac:.3g})"
        report.append(f"{q}: ac/B_ac {ratio:.2f}, e(ac,f64) {e_ac:.2e}, e(ac emulated,ac) {e_emu:.1e}")
        up = lambda t: (t * (1 + 2.0 ** -20)).float()  # noqa: E731  (bounds rounded up to float32)
        data[q] = a.float()
        data[q + "_f64"] = f64[q].float()
        data[q + "_ref"] = ref.float()
        data[q + "_pt"] = emu["pt"][q].float()
        data[q + "_bac"] = up(bac)
        data[q + "_bpt"] = up(bpt)
        data[q + "_b32"] = up(b32)
    attrs = dict(case.attrs)
    attrs.update(deck=case.deck, n=case.x.shape[0], k32=case.k32, second_order=SECOND_ORDER, u=U, seed=case.seed)
    if case.loss_scale is not None:
        attrs["loss_scale"] = case.loss_scale
    path = mf.write("bf16_" + case.name, attrs, data)
    print(f"{os.path.basename(path)} (seed {case.seed}): " + "; ".join(report))
    return path


CASES = [  # (name, factory of a seed, first seed): the next seed is tried where margins fail
    ("linear", linear_case, 1501),
    ("conv2d", lambda s: conv_case(s, "conv2d", 2, 3, 8, 4, 3, 1, 1, True), 1511),
    ("conv2d_s2_nobias", lambda s: conv_case(s, "conv2d_s2_nobias", 2, 2, 9, 5, 3, 2, 1, False), 1521),
    ("attention", attention_case, 1601),
    ("transformer_block", block_case, 1701),
    ("lm_head", lm_head_case, 1801),
    ("embedding", embedding_case, 1901),
    ("residual_block", lambda s: residual_case(s, "residual_block", 2, 4, 4, 6, 1), 2101),
    ("residual_block_proj", lambda s: residual_case(s, "residual_block_proj", 2, 3, 6, 7, 2), 2111),
    ("mlp", mlp_case, 2001),
    ("cnn", cnn_case, 2201),
]


def main():
    only = set(sys.argv[1:])  # e.g. "linear cnn": regenerate only those cases
    for name, make, first in CASES:
        if only and name not in only:
            continue
        for seed in range(first, first + 60):
            case = make(seed)
            case.seed = seed
            if build_and_write(case):
                break
        else:
            raise SystemExit(f"{name}: no seed in [{first}, {first + 60}) with clear margins")
    total = sum(os.path.getsize(os.path.join(mf.OUT, f)) for f in os.listdir(mf.OUT) if f.startswith("bf16_"))
    print(f"bf16 fixtures: {total / 1e3:.1f} kB")


if __name__ == "__main__":
    sys.exit(main())
