#!/usr/bin/env python3
"""Rebuild a pipetrain run's model in PyTorch and evaluate it on the test split.

    tools/to_pytorch.py RUN_DIR [--check] [--save model.pt] [--batch 1000]

Reads RUN_DIR/deck.toml (the effective deck: its [[model.layers]] and [data]) and
RUN_DIR/weights.h5 (/layers/NNN/{weight,bias} in PyTorch shapes; the input shape, the input
transform and each layer's deck settings as attributes, docs/ARCHITECTURE.md), builds a
torch.nn.Sequential, feeds it the test split exactly as pipetrain does (uint8 pixels:
(pixel * input_scale - input_mean) * input_inv_std in float32, the training split's
statistics recorded in weights.h5), and prints

    test accuracy 0.8480  test loss 0.4213  (10000 samples)

--check compares the accuracy with summary.json's final_test_accuracy to 4 decimals.
--save writes the model (torch.save of the nn.Sequential) for use elsewhere.

For a language model (data.source = "text" or "tokens", an lm_head) the line reads

    test accuracy 0.4102  test loss 1.9874  (128768 tokens)

with the next-token accuracy and the mean token loss in nats over the validation windows.

Layers: linear, conv2d, maxpool2d, avgpool2d, relu, gelu, flatten, layernorm, dropout,
batchnorm2d (running statistics from /layers/NNN/state), global_avgpool, residual_block,
embedding, attention, transformer_block, and the losses: softmax_cross_entropy
(nn.CrossEntropyLoss, not a module of the model) or lm_head (its layer norm and vocabulary
projection are the model's last module, returning logits [n, T, V]; a tied head's weight is
the embedding's token weight Parameter itself). docs/MODELS.md gives each layer's PyTorch
equivalent; build() is also used by tools/pytorch_twin.py.
Data: data.source = "fashion-mnist" (IDX .gz under data.path), "hdf5" (data.test), "text"
(the validation split of data.path, docs/DATA.md) or "tokens" (data.test);
"synthetic" samples exist only inside pipetrain.

Exit codes: 0 ok; 1 --check found a different accuracy; 2 bad input (run directory, deck,
weights.h5, an unknown layer or data source); 3 a file could not be read; 4 python3-torch or
python3-h5py is not installed (the message names the package).
"""

import argparse
import gzip
import json
import os
import stat
import struct
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def die(code, msg):
    print(f"to_pytorch: {msg}", file=sys.stderr)
    sys.exit(code)


def need_modules():
    mods = {}
    for name, pkg in (("numpy", "python3-numpy"), ("torch", "python3-torch"), ("h5py", "python3-h5py")):
        try:
            mods[name] = __import__(name)
        except ImportError:
            die(4, f"needs {name}: apt-get install {pkg} (make deps-dev)")
    return mods["numpy"], mods["torch"], mods["h5py"]


def read_deck(run_dir):
    path = os.path.join(run_dir, "deck.toml")
    if not os.path.isfile(path):
        die(3 if os.path.isdir(run_dir) else 2, f"{path}: not found (RUN_DIR must be a pipetrain run directory)")
    if tomllib is None:
        die(2, "needs Python 3.11 (tomllib) to read deck.toml")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        die(2, f"{path}: {e}")


def attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read_idx(path, np):
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(3, f"{path}: {e}")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        die(2, f"{path}: not a uint8 IDX file")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        die(2, f"{path}: {arr.size} values, the header says {dims}")
    return arr.reshape(dims)


FORTUNES = "/usr/share/games/fortunes"  # data.path's default for data.source = "text"


def text_corpus_files(path):
    """The files of a text corpus in pipetrain's order (src/data/corpus_files.cpp): a file, or
    a folder's regular files sorted by name (bytewise), skipping hidden names, names ending in
    .dat (the fortunes index files), symlinks and subfolders."""
    try:
        st = os.stat(path)
    except OSError as e:
        die(2, f"{path}: cannot open text corpus: {e.strerror}")
    if stat.S_ISREG(st.st_mode):
        return [os.fsencode(path)]
    if not stat.S_ISDIR(st.st_mode):
        die(2, f"{path}: text corpus is neither a file nor a folder")
    d = os.fsencode(path)
    names = []
    for name in os.listdir(d):
        if not name or name.startswith(b".") or name.endswith(b".dat"):
            continue
        full = d + b"/" + name
        try:
            if stat.S_ISREG(os.lstat(full).st_mode):
                names.append(full)
        except OSError:
            continue
    names.sort()
    if not names:
        die(2, f"{path}: no text files in this folder")
    return names


def read_text_corpus(path, np):
    """The corpus bytes (uint8), the files concatenated in order."""
    parts = []
    for name in text_corpus_files(path):
        try:
            with open(name, "rb") as f:
                parts.append(f.read())
        except OSError as e:
            die(3, f"{os.fsdecode(name)}: {e}")
    data = b"".join(parts)
    if not data:
        die(2, f"{path}: the text corpus is empty")
    return np.frombuffer(data, dtype=np.uint8)


def read_tokens(path, np, h5py):
    """A token file: .h5/.hdf5 with a 1-D /tokens, else raw little-endian uint16."""
    try:
        if path.endswith(".h5") or path.endswith(".hdf5"):
            with h5py.File(path, "r") as f:
                return f["tokens"][()].astype(np.int64)
        return np.fromfile(path, dtype="<u2").astype(np.int64)
    except (OSError, KeyError) as e:
        die(3, f"{path}: {e}")


def token_regions(deck, np, h5py):
    """(train tokens, validation tokens) as int64 arrays: text splits one corpus at
    floor(95%) of its bytes (docs/DATA.md), tokens reads data.train and data.test."""
    data = deck.get("data", {})
    if data.get("source") == "text":
        path = data.get("path", FORTUNES)  # deck.toml (the effective deck) has it resolved
        corpus = read_text_corpus(path, np).astype(np.int64)
        cut = len(corpus) * 95 // 100
        return corpus[:cut], corpus[cut:]
    return read_tokens(data.get("train", ""), np, h5py), read_tokens(data.get("test", ""), np, h5py)


def eval_windows(tokens, T, np):
    """Validation/test windows: window k reads [kT, kT + T + 1); inputs and next-token labels."""
    n = (len(tokens) - 1) // T if len(tokens) > T else 0
    idx = np.arange(n)[:, None] * T + np.arange(T + 1)[None, :]
    w = tokens[idx] if n else np.zeros((0, T + 1), np.int64)
    return w[:, :T].astype(np.float32), w[:, 1:].astype(np.int64)


def test_split(deck, attrs, np, h5py):
    """The test samples as the model's float32 input (N, *input_shape), and the labels."""
    data = deck.get("data", {})
    if data.get("source", "fashion-mnist") in ("text", "tokens"):
        T = int(data.get("seq_len", 128))
        return eval_windows(token_regions(deck, np, h5py)[1], T, np)
    return image_split(deck, attrs, np, h5py, "test")


def image_split(deck, attrs, np, h5py, split):
    """One split ("train" or "test") of image data as float32 input (N, *input_shape) and labels."""
    data = deck.get("data", {})
    source = data.get("source", "fashion-mnist")
    shape = [int(v) for v in attrs["input_shape"]]
    if source == "fashion-mnist":
        d = data.get("path", "/usr/share/datasets/fashion-mnist")
        prefix = "train" if split == "train" else "t10k"
        raw = read_idx(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz"), np)
        labels = read_idx(os.path.join(d, f"{prefix}-labels-idx1-ubyte.gz"), np).astype(np.int64)
    elif source == "hdf5":
        path = data.get(split, "")
        try:
            with h5py.File(path, "r") as f:
                raw, labels = f["images"][()], f["labels"][()].astype(np.int64)
        except (OSError, KeyError) as e:
            die(3, f"{path}: {e}")
    else:
        die(2, f"data.source = \"{source}\": synthetic samples exist only inside pipetrain; "
               "to_pytorch evaluates fashion-mnist, hdf5, text and tokens data")
    return input_floats(raw.reshape((raw.shape[0], *shape)), attrs, np), labels


def input_floats(raw, attrs, np):
    """Image samples as pipetrain feeds them: uint8 pixels standardised with the training
    split's statistics recorded in weights.h5, float32 data as stored."""
    if raw.dtype == np.uint8:
        transform = attr_str(attrs.get("input_transform", ""))
        if transform.startswith("identity"):
            die(2, "weights.h5 says the input is used as stored, but the data are uint8")
        # exactly pipetrain's arithmetic: float32 multiply, subtract, multiply
        scale = np.float32(attrs["input_scale"])
        mean = np.float32(attrs["input_mean"])
        inv_std = np.float32(attrs["input_inv_std"])
        x = (raw.astype(np.float32) * scale - mean) * inv_std
    else:
        x = raw.astype(np.float32)
    return x.astype(np.float32)


_MODULES = {}


def modules(torch):
    """The PyTorch modules of pipetrain's composite layers (docs/MODELS.md), defined once
    torch is imported. Each has H5 = [(name in weights.h5, its parameter's attribute path)]
    in pipetrain's parameter order; stock modules use their own parameter names."""
    if _MODULES:
        return _MODULES
    nn = torch.nn

    def causal_mask(T):
        return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    class Embedding(nn.Module):
        """wte(tokens) + wpe(positions); token ids arrive as exact float32 values."""
        H5 = [("weight", "wte.weight"), ("pos", "wpe.weight")]

        def __init__(self, V, T, D):
            super().__init__()
            self.wte = nn.Embedding(V, D)
            self.wpe = nn.Embedding(T, D)
            self.register_buffer("positions", torch.arange(T), persistent=False)

        def forward(self, tokens):
            return self.wte(tokens.long()) + self.wpe(self.positions)

    class Attention(nn.Module):
        """Causal multi-head self-attention on [n, T, D]."""
        H5 = [("in_proj_weight", "attn.in_proj_weight"), ("in_proj_bias", "attn.in_proj_bias"),
              ("out_proj.weight", "attn.out_proj.weight"), ("out_proj.bias", "attn.out_proj.bias")]

        def __init__(self, D, heads, T, p):
            super().__init__()
            self.attn = nn.MultiheadAttention(D, heads, dropout=p, batch_first=True)
            self.register_buffer("mask", causal_mask(T), persistent=False)

        def forward(self, x):
            return self.attn(x, x, x, attn_mask=self.mask, need_weights=False)[0]

    class Block(nn.Module):
        """Pre-LN transformer block: h = x + attn(ln1(x)); y = h + mlp(ln2(h)), exact GELU."""

        def __init__(self, D, heads, T, mlp_ratio=4, p=0.0):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.attn = nn.MultiheadAttention(D, heads, dropout=p, batch_first=True)
            self.ln2 = nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, mlp_ratio * D), nn.GELU(), nn.Linear(mlp_ratio * D, D))
            self.drop = nn.Dropout(p)
            self.register_buffer("mask", causal_mask(T), persistent=False)

        def forward(self, x):
            a = self.ln1(x)
            h = x + self.drop(self.attn(a, a, a, attn_mask=self.mask, need_weights=False)[0])
            return h + self.drop(self.mlp(self.ln2(h)))

    class LMHead(nn.Module):
        """The head's layer norm and vocabulary projection: logits [n, T, V]. The loss
        (next-token cross entropy) is TokenCrossEntropy, outside the model."""
        H5 = [("norm.weight", "norm.weight"), ("norm.bias", "norm.bias"), ("weight", "proj.weight"),
              ("bias", "proj.bias")]

        def __init__(self, D, V, bias, eps):
            super().__init__()
            self.norm = nn.LayerNorm(D, eps=eps)
            self.proj = nn.Linear(D, V, bias=bias)

        def forward(self, x):
            return self.proj(self.norm(x))

    class TokenCrossEntropy(nn.Module):
        """Cross entropy of logits [n, T, V] against labels [n, T] over every token."""

        def __init__(self, reduction="sum"):
            super().__init__()
            self.reduction = reduction

        def forward(self, logits, labels):
            return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                               reduction=self.reduction)

    class ResidualBlock(nn.Module):
        """ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the
        shortcut is x, or downsample = 1x1 conv + batch norm when channels or stride change."""

        def __init__(self, C, channels, stride, momentum, eps):
            super().__init__()
            self.conv1 = nn.Conv2d(C, channels, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels, eps=eps, momentum=momentum)
            self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels, eps=eps, momentum=momentum)
            self.downsample = None
            if stride != 1 or channels != C:
                self.downsample = nn.Sequential(nn.Conv2d(C, channels, 1, stride, bias=False),
                                                nn.BatchNorm2d(channels, eps=eps, momentum=momentum))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.downsample is None else self.downsample(x)))

    for cls in (Embedding, Attention, Block, LMHead, TokenCrossEntropy, ResidualBlock):
        cls.__qualname__ = cls.__name__  # picklable by name (--save) from this module
        globals()[cls.__name__] = cls
        _MODULES[cls.__name__] = cls
    return _MODULES


def h5_params(m):
    """[(name in weights.h5, Parameter)] of a layer's module, in pipetrain's order."""
    names = getattr(m, "H5", None)
    if names is None:
        return list(m.named_parameters())
    out = []
    for h5name, path in names:
        obj = m
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            out.append((h5name, obj))
    return out


def h5_state(m, torch):
    """A layer's running state in pipetrain's order: running mean then running var of each
    batch norm, in module order (residual_block: bn1, bn2, downsample.1)."""
    out = []
    for sub in m.modules():
        if isinstance(sub, torch.nn.BatchNorm2d):
            out += [sub.running_mean, sub.running_var]
    return out


def dropout_of(spec):
    """The dropout probability a layer's deck settings ask for (0 for layers without one)."""
    t = spec.get("type")
    if t == "dropout":
        return float(spec.get("p", 0.0))
    if t in ("attention", "transformer_block"):
        return float(spec.get("dropout", 0.0))
    return 0.0


def build(deck, wf, torch):
    """The model as a torch.nn.Sequential (one module per pipetrain layer but the loss) with
    weights.h5's parameters and running state loaded, and the loss (reduction "sum": over
    samples, or over tokens for lm_head)."""
    nn = torch.nn
    M = modules(torch)
    specs = deck.get("model", {}).get("layers", [])
    groups = wf["layers"]
    if len(specs) != len(groups):
        die(2, f"deck.toml has {len(specs)} layers, weights.h5 {len(groups)}")
    names = [attr_str(groups[f"{i:03d}"].attrs.get("name", specs[i].get("name", ""))) for i in range(len(specs))]
    mods, loss, by_index = [], None, {}
    for i, spec in enumerate(specs):
        g = groups[f"{i:03d}"]
        t = spec.get("type")
        if attr_str(g.attrs.get("type", t)) != t:
            die(2, f"layer {i}: deck.toml says {t}, weights.h5 says {attr_str(g.attrs['type'])}")
        in_shape = [int(v) for v in g.attrs["in_shape"]]
        if t == "linear":
            m = nn.Linear(in_shape[0], int(spec["out"]), bias=bool(spec.get("bias", True)))
        elif t == "conv2d":
            m = nn.Conv2d(in_shape[0], int(spec["channels"]), int(spec["kernel"]), stride=int(spec.get("stride", 1)),
                          padding=int(spec.get("padding", 0)), bias=bool(spec.get("bias", True)))
        elif t in ("maxpool2d", "avgpool2d"):
            k = int(spec["kernel"])
            stride, pad = int(spec.get("stride", k)), int(spec.get("padding", 0))
            m = nn.MaxPool2d(k, stride, pad) if t == "maxpool2d" else nn.AvgPool2d(k, stride, pad, count_include_pad=True)
        elif t == "relu":
            m = nn.ReLU()
        elif t == "gelu":
            m = nn.GELU()  # the erf form, as pipetrain's
        elif t == "flatten":
            m = nn.Flatten()
        elif t == "layernorm":
            m = nn.LayerNorm(in_shape, eps=float(spec.get("eps", 1e-5)))
        elif t == "dropout":
            m = nn.Dropout(float(spec["p"]))
        elif t == "batchnorm2d":
            m = nn.BatchNorm2d(in_shape[0], eps=float(spec.get("eps", 1e-5)), momentum=float(spec.get("momentum", 0.1)))
        elif t == "global_avgpool":
            m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        elif t == "residual_block":
            m = M["ResidualBlock"](in_shape[0], int(spec["channels"]), int(spec.get("stride", 1)),
                                   float(spec.get("momentum", 0.1)), float(spec.get("eps", 1e-5)))
        elif t == "embedding":
            if "weight" not in g:
                die(2, f"layer {i} (embedding): weights.h5 has no 'weight'")
            m = M["Embedding"](int(g["weight"].shape[0]), in_shape[0], int(spec["dim"]))
        elif t == "attention":
            m = M["Attention"](in_shape[1], int(spec["heads"]), in_shape[0], float(spec.get("dropout", 0.0)))
        elif t == "transformer_block":
            m = M["Block"](in_shape[1], int(spec["heads"]), in_shape[0], int(spec.get("mlp_ratio", 4)),
                           float(spec.get("dropout", 0.0)))
        elif t == "lm_head":
            if i != len(specs) - 1:
                die(2, f"layer {i}: lm_head must be the last layer")
            if "weight" not in g:
                die(2, f"layer {i} (lm_head): weights.h5 has no 'weight'")
            m = M["LMHead"](in_shape[1], int(g["weight"].shape[0]), bool(spec.get("bias", False)),
                            float(spec.get("eps", 1e-5)))
            tie = spec.get("tie", "")
            if tie:
                j = names.index(tie) if tie in names else -1
                if j < 0 or j >= i or not isinstance(by_index.get(j), M["Embedding"]):
                    die(2, f"layer {i} (lm_head): tie = '{tie}' names no embedding layer before it")
                m.proj.weight = by_index[j].wte.weight  # one Parameter: PyTorch sums both uses' gradients
            loss = M["TokenCrossEntropy"]("sum")
        elif t == "softmax_cross_entropy":
            if i != len(specs) - 1:
                die(2, f"layer {i}: softmax_cross_entropy must be the last layer")
            loss = nn.CrossEntropyLoss(reduction="sum")
            continue
        else:
            die(2, f"layer {i}: type '{t}' is not supported here")
        with torch.no_grad():
            for name, p in h5_params(m):
                if name not in g:
                    die(2, f"layer {i} ({t}): weights.h5 has no '{name}'")
                w = torch.from_numpy(g[name][()])
                if tuple(w.shape) != tuple(p.shape):
                    die(2, f"layer {i} ({t}): '{name}' is {tuple(w.shape)} in weights.h5, torch expects {tuple(p.shape)}")
                if t == "lm_head" and name == "weight" and spec.get("tie", ""):
                    if not torch.equal(p, w):  # a soft link to the embedding's dataset: the same values
                        die(2, f"layer {i} (lm_head): the tied 'weight' differs from the embedding's in weights.h5")
                    continue
                p.copy_(w)
            state = h5_state(m, torch)
            if state:
                if "state" not in g:
                    die(2, f"layer {i} ({t}): weights.h5 has no running state ('state'); written by an older pipetrain?")
                v = torch.from_numpy(g["state"][()])
                want = sum(b.numel() for b in state)
                if v.numel() != want:
                    die(2, f"layer {i} ({t}): 'state' holds {v.numel()} values, torch expects {want}")
                at = 0
                for b in state:
                    b.copy_(v[at:at + b.numel()])
                    at += b.numel()
        by_index[i] = m
        mods.append(m)
    if loss is None:
        die(2, "the model has no loss layer (softmax_cross_entropy or lm_head)")
    return nn.Sequential(*mods), loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the accuracy equals summary.json's to 4 decimals")
    ap.add_argument("--save", help="torch.save the nn.Sequential here")
    ap.add_argument("--batch", type=int, default=1000)
    a = ap.parse_args()
    np, torch, h5py = need_modules()
    deck = read_deck(a.run_dir)
    wpath = os.path.join(a.run_dir, "weights.h5")
    try:
        wf = h5py.File(wpath, "r")
    except OSError as e:
        die(3, f"{wpath}: {e}")
    with wf:
        if attr_str(wf.attrs.get("format", "")) != "pipetrain-weights" or "input_shape" not in wf.attrs:
            die(2, f"{wpath}: no input shape and transform recorded (written by an older pipetrain?)")
        model, loss_fn = build(deck, wf, torch)
        x, y = test_split(deck, dict(wf.attrs), np, h5py)
    model.eval()
    correct, loss_sum = 0, 0.0
    batch = a.batch if y.ndim == 1 else max(1, min(a.batch, 64))  # language models: [n, T, V] logits per batch
    with torch.no_grad():
        for i in range(0, len(y), batch):
            xb, yb = torch.from_numpy(x[i:i + batch]), torch.from_numpy(y[i:i + batch])
            logits = model(xb)
            loss_sum += float(loss_fn(logits, yb))
            correct += int((logits.argmax(dim=-1) == yb).sum())  # the first maximum, as pipetrain's
    count = int(y.size)
    acc = correct / count
    unit = "samples" if y.ndim == 1 else "tokens"
    print(f"test accuracy {acc:.4f}  test loss {loss_sum / count:.4f}  ({count} {unit})")
    if a.save:
        torch.save(model, a.save)
        print(f"saved {a.save}")
    if a.check:
        spath = os.path.join(a.run_dir, "summary.json")
        try:
            with open(spath) as f:
                want = json.load(f)["final_test_accuracy"]
        except (OSError, ValueError, KeyError) as e:
            die(3, f"{spath}: {e}")
        if round(acc, 4) == round(want, 4):
            print(f"matches summary.json final_test_accuracy {want:.4f}")
        else:
            print(f"DIFFERS from summary.json final_test_accuracy {want:.4f}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
