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

Layers: linear, conv2d, maxpool2d, avgpool2d, relu, gelu, flatten, layernorm, dropout, and
softmax_cross_entropy as the loss (nn.CrossEntropyLoss, not a module of the model).
Data: data.source = "fashion-mnist" (IDX .gz under data.path) or "hdf5" (data.test);
"synthetic" samples exist only inside pipetrain.

Exit codes: 0 ok; 1 --check found a different accuracy; 2 bad input (run directory, deck,
weights.h5, an unknown layer or data source); 3 a file could not be read; 4 python3-torch or
python3-h5py is not installed (the message names the package).
"""

import argparse
import gzip
import json
import os
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


def test_split(deck, attrs, np, h5py):
    """The test samples as the model's float32 input (N, *input_shape), and the labels."""
    data = deck.get("data", {})
    source = data.get("source", "fashion-mnist")
    shape = [int(v) for v in attrs["input_shape"]]
    if source == "fashion-mnist":
        d = data.get("path", "/usr/share/datasets/fashion-mnist")
        raw = read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), np)
        labels = read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), np).astype(np.int64)
    elif source == "hdf5":
        path = data.get("test", "")
        try:
            with h5py.File(path, "r") as f:
                raw, labels = f["images"][()], f["labels"][()].astype(np.int64)
        except (OSError, KeyError) as e:
            die(3, f"{path}: {e}")
    else:
        die(2, f"data.source = \"{source}\": synthetic samples exist only inside pipetrain; "
               "to_pytorch evaluates fashion-mnist and hdf5 data")
    raw = raw.reshape((raw.shape[0], *shape))
    if raw.dtype == np.uint8:
        transform = attr_str(attrs.get("input_transform", ""))
        if transform.startswith("identity"):
            die(2, "weights.h5 says the input is used as stored, but the test data are uint8")
        # exactly pipetrain's arithmetic: float32 multiply, subtract, multiply
        scale = np.float32(attrs["input_scale"])
        mean = np.float32(attrs["input_mean"])
        inv_std = np.float32(attrs["input_inv_std"])
        x = (raw.astype(np.float32) * scale - mean) * inv_std
    else:
        x = raw.astype(np.float32)
    return x.astype(np.float32), labels


def build(deck, wf, torch):
    nn = torch.nn
    specs = deck.get("model", {}).get("layers", [])
    groups = wf["layers"]
    if len(specs) != len(groups):
        die(2, f"deck.toml has {len(specs)} layers, weights.h5 {len(groups)}")
    mods, loss = [], None
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
        elif t == "softmax_cross_entropy":
            if i != len(specs) - 1:
                die(2, f"layer {i}: softmax_cross_entropy must be the last layer")
            loss = nn.CrossEntropyLoss(reduction="sum")
            continue
        else:
            die(2, f"layer {i}: type '{t}' is not supported here")
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name not in g:
                    die(2, f"layer {i} ({t}): weights.h5 has no '{name}'")
                w = torch.from_numpy(g[name][()])
                if tuple(w.shape) != tuple(p.shape):
                    die(2, f"layer {i} ({t}): '{name}' is {tuple(w.shape)} in weights.h5, torch expects {tuple(p.shape)}")
                p.copy_(w)
        mods.append(m)
    if loss is None:
        die(2, "the model has no softmax_cross_entropy loss layer")
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
    with torch.no_grad():
        for i in range(0, len(y), a.batch):
            xb, yb = torch.from_numpy(x[i:i + a.batch]), torch.from_numpy(y[i:i + a.batch])
            logits = model(xb)
            loss_sum += float(loss_fn(logits, yb))
            correct += int((logits.argmax(dim=1) == yb).sum())
    acc = correct / len(y)
    print(f"test accuracy {acc:.4f}  test loss {loss_sum / len(y):.4f}  ({len(y)} samples)")
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
