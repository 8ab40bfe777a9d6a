#!/usr/bin/env python3
"""PyTorch peer of a pipetrain run, for throughput only (bench/peer_pytorch.sh).

    bench/peer_models.py RUN_DIR STEPS INTERVAL

Builds the run's model in PyTorch from RUN_DIR/deck.toml and weights_init.h5
(tools/to_pytorch.py's builder: the same layers, sizes and initial weights), feeds it the
same batches as pipetrain (tools/pytorch_twin.py's port of the epoch permutation and text
windows; data preloaded as in pipetrain), one minibatch per step (runs are shorter than an epoch) with the deck's optimizer
and learning-rate schedule, on one thread; when the deck's train.precision is "bf16" the
forward and the loss run under torch.autocast("cpu", dtype=torch.bfloat16). Prints one line per INTERVAL steps:
'INTERVAL samples_per_s tokens_per_s' (tokens_per_s 0 for image data), then
'LOSS <last step loss> torch <version> threads <n>'. Only the training steps are timed (the
batch gather included, as in pipetrain's step records).
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import pytorch_twin as tw  # noqa: E402
import to_pytorch as tp  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    run_dir, steps, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    np, torch, h5py = tp.need_modules()
    torch.set_num_threads(1)
    deck = tp.read_deck(run_dir)
    train = deck.get("train", {})
    with h5py.File(os.path.join(run_dir, "weights_init.h5"), "r") as wf:
        model, loss_fn = tp.build(deck, wf, torch)
        attrs = dict(wf.attrs)
    data = tw.Batches(deck, attrs, np, torch, h5py)
    B = int(train.get("batch_size", 128))
    spe = data.n // B
    T = data.T if data.source in ("text", "tokens") else 0
    total = min(int(train.get("epochs", 1)) * spe, steps)
    bf16 = train.get("precision", "fp32") == "bf16"  # the run's precision: bf16 autocast on this side
    model.train()
    opt = tw.make_optimizer(train, list(model.parameters()), torch)
    data.perm(0)  # the first epoch's permutation before the clock starts
    t0 = time.perf_counter()
    for k in range(1, total + 1):
        epoch, t = (k - 1) // spe, (k - 1) % spe
        x, y = data.get(data.perm(epoch)[t * B:(t + 1) * B], epoch)
        for g in opt.param_groups:
            g["lr"] = tw.learning_rate(train, k - 1, total)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y) / (B * max(T, 1))
        loss.backward()
        opt.step()
        if k % interval == 0:
            t1 = time.perf_counter()
            sps = interval * B / (t1 - t0)
            print(f"INTERVAL {sps:.2f} {sps * T:.1f}", flush=True)
            t0 = t1
    print(f"LOSS {loss.item():.4f} torch {torch.__version__} threads {torch.get_num_threads()} precision {'bf16 autocast' if bf16 else 'fp32'}")


if __name__ == "__main__":
    main()
