#!/usr/bin/env python3
"""PyTorch twin of pipetrain's Fashion-MNIST MLP and CNN, for throughput comparison only.

Trains the same model (sizes, batch 128, SGD with momentum) on one thread and prints one
line per 50-step interval: 'INTERVAL samples_per_s'. Data is preloaded as a float tensor
and standardised, like pipetrain; only the training steps are timed.
With a third argument bf16 the forward and the loss run under torch.autocast("cpu",
dtype=torch.bfloat16) (fp32 master weights and optimizer), PyTorch's counterpart of
pipetrain's train.precision = "bf16".
Usage: peer_pytorch.py mlp|cnn STEPS [fp32|bf16]
"""
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def load_images():
    with gzip.open(f"{DATA}/train-images-idx3-ubyte.gz", "rb") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/train-labels-idx1-ubyte.gz", "rb") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = x.astype(np.float32) / 255.0
    x = (x - x.mean()) / x.std()
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    kind, steps = sys.argv[1], int(sys.argv[2])
    bf16 = len(sys.argv) > 3 and sys.argv[3] == "bf16"  # torch.autocast("cpu", bfloat16), fp32 master weights
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x, y = load_images()
    net = model(kind)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0])
    B, interval = 128, 50
    t0 = time.perf_counter()
    for step in range(steps):
        idx = perm[(step * B) % (x.shape[0] - B):][:B]
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        if (step + 1) % interval == 0:
            t1 = time.perf_counter()
            print(f"INTERVAL {interval * B / (t1 - t0):.1f}", flush=True)
            t0 = t1
    print(f"LOSS {loss.item():.4f} torch {torch.__version__} threads {torch.get_num_threads()} precision {'bf16 autocast' if bf16 else 'fp32'}")


if __name__ == "__main__":
    main()
