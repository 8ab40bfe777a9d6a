#!/usr/bin/env python3
"""PyTorch DistributedDataParallel baseline for time to accuracy (bench/time_to_accuracy.sh).

    bench/ddp_baseline.py RUN_DIR --out FILE.jsonl [--ranks 2] [--eval-every N] [--budget S]
                          [--target-loss L]

Trains the model of a pipetrain run (RUN_DIR/deck.toml and its weights_init.h5: the same
layers and initial weights, built by tools/to_pytorch.py) with torch.distributed (gloo,
--ranks processes on 127.0.0.1, one thread each, process r pinned to core r when it exists).
Every minibatch of the deck's batch_size B is pipetrain's (tools/pytorch_twin.py's port of
the epoch permutation and text windows); rank r takes its r-th contiguous share of B/ranks
samples, DDP averages the gradients, so each update is the gradient of the mean loss over
the whole minibatch, as in pipetrain. The deck's optimizer and learning-rate schedule over
its total steps (train.epochs, train.max_steps). Every --eval-every steps (default: the
deck's train.eval_every) the validation/test split is evaluated, its windows shared between
the ranks and the sums all-reduced; evaluation time is not training time. Stops at the
target (--target-loss, default train.target_loss, in nats), at the end of the schedule or
when --budget seconds of wall time (evaluation included) have passed.

Writes FILE.jsonl: {"type":"step",...} every 25 steps (global mean training loss),
{"type":"eval","step","train_time_s","test_loss","test_bits","wall_s"} per evaluation and a
final {"type":"summary","time_to_target_s" (null if not reached),"steps","train_time_s",
"tokens_per_s"}.
"""
import argparse
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import pytorch_twin as tw  # noqa: E402
import to_pytorch as tp  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port):
    np, torch, h5py = tp.need_modules()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    try:
        if rank < len(os.sched_getaffinity(0)):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
    except (AttributeError, OSError):
        pass
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    W = a.ranks
    deck = tp.read_deck(a.run_dir)
    train = deck.get("train", {})
    with h5py.File(os.path.join(a.run_dir, "weights_init.h5"), "r") as wf:
        model, loss_fn = tp.build(deck, wf, torch)
        attrs = dict(wf.attrs)
    data = tw.Batches(deck, attrs, np, torch, h5py)
    tokens = data.source in ("text", "tokens")
    T = data.T if tokens else 1
    xv, yv = tp.test_split(deck, attrs, np, h5py)
    B = int(train.get("batch_size", 128))
    if B % W:
        raise SystemExit(f"batch_size {B} is not a multiple of {W} ranks")
    b = B // W
    spe = data.n // B
    total = int(train.get("epochs", 1)) * spe
    if int(train.get("max_steps", 0)) > 0:
        total = min(total, int(train["max_steps"]))
    every = a.eval_every if a.eval_every is not None else int(train.get("eval_every", 0)) or spe
    target = a.target_loss if a.target_loss is not None else float(train.get("target_loss", 0.0))
    eval_mb = int(train.get("eval_batch_size", 500))
    # constant index buffers (causal masks, positions) are the same everywhere; gloo cannot broadcast bool
    DDP._set_params_and_buffers_to_ignore_for_model(
        model, [n for n, b in model.named_buffers() if not b.is_floating_point()])
    net = DDP(model, broadcast_buffers=False)  # replicas keep their own running statistics, as in pipetrain
    opt = tw.make_optimizer(train, list(net.parameters()), torch)
    log = open(a.out, "w") if rank == 0 else None

    def emit(rec):
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)

    def evaluate():
        net.eval()
        n = len(yv)
        lo, hi = rank * n // W, (rank + 1) * n // W
        s = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, labels
        with torch.no_grad():
            for i in range(lo, hi, eval_mb):
                x, y = torch.from_numpy(xv[i:min(hi, i + eval_mb)]), torch.from_numpy(yv[i:min(hi, i + eval_mb)])
                logits = net.module(x)
                s[0] += float(loss_fn(logits, y))
                s[1] += int((logits.argmax(dim=-1) == y).sum())
                s[2] += y.numel()
        dist.all_reduce(s)
        net.train()
        return float(s[0] / s[2]), float(s[1] / s[2])

    if rank == 0:
        print(f"ddp: {W} processes (gloo), batch {B} = {W} x {b}, {total} steps in the schedule, eval every {every}, "
              f"target {target} nats, budget {a.budget} s", flush=True)
    dist.barrier()
    t_start = time.perf_counter()
    train_time, hit_time, k = 0.0, None, 0
    window = torch.zeros(2, dtype=torch.float64)
    net.train()
    while k < total:
        k += 1
        t0 = time.perf_counter()
        epoch, t = (k - 1) // spe, (k - 1) % spe
        idx = data.perm(epoch)[t * B:(t + 1) * B][rank * b:(rank + 1) * b]
        x, y = data.get(idx, epoch)
        for g in opt.param_groups:
            g["lr"] = tw.learning_rate(train, k - 1, total)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y) / (b * T)
        loss.backward()
        opt.step()
        train_time += time.perf_counter() - t0
        window += torch.tensor([float(loss), 1.0], dtype=torch.float64)
        if k % 25 == 0:
            dist.all_reduce(window)
            emit({"type": "step", "step": k, "loss": float(window[0] / window[1]), "train_time_s": train_time,
                  "tokens_per_s": k * B * T / train_time})
            window.zero_()
        stop = torch.zeros(1)
        if k % every == 0 or k == total:
            test_loss, acc = evaluate()
            rec = {"type": "eval", "step": k, "train_time_s": train_time, "test_loss": test_loss,
                   "test_bits": test_loss / 0.6931471805599453, "test_accuracy": acc,
                   "wall_s": time.perf_counter() - t_start}
            emit(rec)
            if target > 0 and test_loss <= target:
                hit_time = train_time
                stop[0] = 1
        if rank == 0 and time.perf_counter() - t_start > a.budget:
            stop[0] = 1
        dist.broadcast(stop, 0)
        if stop[0]:
            break
    emit({"type": "summary", "time_to_target_s": hit_time, "steps": k, "train_time_s": train_time,
          "tokens_per_s": k * B * T / max(train_time, 1e-9), "ranks": W, "batch_size": B})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--budget", type=float, default=900.0, help="wall seconds, evaluation included")
    ap.add_argument("--target-loss", type=float)
    a = ap.parse_args()
    tp.need_modules()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(a, free_port()), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
