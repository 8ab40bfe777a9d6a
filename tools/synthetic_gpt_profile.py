#!/usr/bin/env python3
"""A synthetic pipetrain profile (docs/PROFILE.md) of a GPT at a given tensor-parallel degree,
for planning at sizes this machine cannot run: `pipetrain plan --profile` reads one file per
degree (--profile p_t1.json --profile p_t2.json ...) and chooses t, the split, the replicas,
the schedule and recomputation.

Layers: a vocabulary-parallel embedding, L pre-LN blocks split Megatron's way, a
vocabulary-parallel head. Per microbatch of b sequences of s tokens, width h, a heads,
vocabulary V, at degree t, in bf16 (Megatron's counts; Narayanan et al. SC21 and Korthikanti
et al. 2022):
  block forward FLOPs      (24 b s h^2 + 4 b s^2 h) / t; backward twice that, of which the
                           weight gradients (W) are 24 b s h^2 / t;
  selective recomputation  adds the attention core's 4 b s^2 h / t to the backward, and drops
                           its 5 a s^2 b / t bytes from the stash;
  block stash              s b h (10 + 24 / t) + 5 a s^2 b / t bytes (16-bit activations,
                           no sequence parallelism);
  head                     2 b s h V / t FLOPs forward, its bf16 logits kept (2 b s V / t bytes);
  parameters               4 bytes each (the fp32 master), AdamW's state 8 bytes each; a
                           block's norms and row-parallel biases (6 h) are whole on every rank;
  tensor sums              2 per block (1 per embedding and head) of 2 b s h bytes (bf16) each way.
Times are FLOPs / --flops (the rate a GPU sustains in its GEMMs; default 1.5e14, an A100's
bf16 312 TFLOP/s at 48%); memory-bound layers move their bytes at --hbm (default 2e12 B/s).
The network is not in the profile: give it to `plan` with --bandwidth and --latency.

  tools/synthetic_gpt_profile.py --tensor 2 --out p_t2.json   # the zero-bubble paper's 6.2B
"""
import argparse
import json


def block(i, a, t):
    b, s, h = a.microbatch, a.seq, a.hidden
    fwd = (24 * b * s * h * h + 4 * b * s * s * h) / t / a.flops
    wgt = 24 * b * s * h * h / t / a.flops
    core = 4 * b * s * s * h / t / a.flops
    keep = s * b * h * (10 + 24 / t)
    probs = 5 * a.heads * s * s * b / t
    params = (12 * h * h + 7 * h) / t + 6 * h
    return {"index": i, "name": f"block{i}", "type": "transformer_block", "forward_s": fwd, "backward_s": 2 * fwd,
            "backward_weight_s": wgt, "output_bytes": 2 * b * s * h, "stash_bytes": keep + probs,
            "param_bytes": 4 * params, "optimizer_bytes": 8 * params, "product_s": 0, "convert_s": 0,
            "selective_backward_s": 2 * fwd + core, "selective_stash_bytes": keep,
            "tensor_sums": 2 if t > 1 else 0, "tensor_sum_bytes": 2 * 2 * b * s * h if t > 1 else 0}


def embedding(a, t):
    b, s, h = a.microbatch, a.seq, a.hidden
    move = 2 * b * s * h / a.hbm
    params = a.vocab * h / t + s * h
    return {"index": 0, "name": "tok", "type": "embedding", "forward_s": move, "backward_s": 2 * move,
            "backward_weight_s": 2 * move, "output_bytes": 2 * b * s * h, "stash_bytes": 2 * b * s * h,
            "param_bytes": 4 * params, "optimizer_bytes": 8 * params, "product_s": 0, "convert_s": 0,
            "selective_backward_s": 2 * move, "selective_stash_bytes": 2 * b * s * h,
            "tensor_sums": 1 if t > 1 else 0, "tensor_sum_bytes": 2 * b * s * h if t > 1 else 0}


def head(i, a, t):
    b, s, h, v = a.microbatch, a.seq, a.hidden, a.vocab
    fwd = 2 * b * s * h * v / t / a.flops
    keep = 2 * b * s * h + 2 * b * s * v / t
    params = v * h / t + 2 * h
    return {"index": i, "name": "head", "type": "lm_head", "forward_s": fwd, "backward_s": 2 * fwd,
            "backward_weight_s": fwd, "output_bytes": 4 * b, "stash_bytes": keep,
            "param_bytes": 4 * params, "optimizer_bytes": 8 * params, "product_s": 0, "convert_s": 0,
            "selective_backward_s": 2 * fwd, "selective_stash_bytes": keep,
            "tensor_sums": 1 if t > 1 else 0, "tensor_sum_bytes": 2 * b * s * h if t > 1 else 0}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=51200, help="a multiple of every t (Megatron pads GPT-2's 50257)")
    p.add_argument("--microbatch", type=int, default=1, help="sequences per profiled microbatch")
    p.add_argument("--tensor", type=int, default=1, help="the tensor-parallel degree t of this profile")
    p.add_argument("--flops", type=float, default=1.5e14, help="sustained GEMM FLOP/s of one device")
    p.add_argument("--hbm", type=float, default=2e12, help="memory bandwidth of one device, bytes/s")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    t = a.tensor
    if t < 1 or a.heads % t or a.vocab % t or (4 * a.hidden) % t:
        p.error(f"--tensor {t} must divide the heads ({a.heads}), the vocabulary ({a.vocab}) and 4 h")
    layers = [embedding(a, t)] + [block(i, a, t) for i in range(1, a.layers + 1)] + [head(a.layers + 1, a, t)]
    n = a.layers * (12 * a.hidden ** 2 + 13 * a.hidden) + 2 * a.vocab * a.hidden + a.seq * a.hidden
    prof = {"format": "pipetrain-profile-1",
            "source": f"synthetic GPT (tools/synthetic_gpt_profile.py): L {a.layers}, h {a.hidden}, heads {a.heads}, "
                      f"s {a.seq}, V {a.vocab}, {n / 1e9:.2f}B parameters ({(n - a.vocab * a.hidden) / 1e9:.2f}B with the head "
                      f"tied), one part of t = {t}, "
                      f"{a.flops:.3g} FLOP/s, {a.hbm:.3g} B/s",
            "device": "synthetic", "precision": "bf16", "microbatch": a.microbatch, "input_bytes": 4 * a.microbatch * a.seq,
            "optimizer_s_per_byte": 7.5 / a.hbm, "tensor": t, "layers": layers,
            "network": {"measured": False, "bandwidth": 0, "latency": 0, "allreduce_ranks": 0, "p2p": [], "allreduce": []}}
    with open(a.out, "w") as f:
        json.dump(prof, f, indent=2)
    print(f"wrote {a.out}: {prof['source']}")


if __name__ == "__main__":
    main()
