#!/usr/bin/env bash
# Tensor parallelism (parallel.tensor, issue 25; the blocks split Megatron's way, the
# embedding and the head vocabulary-parallel): tinygpt (data.seq_len 64, batch 8, 1f1b
# with 2 microbatches, fp32) trained by one process is the reference; the same deck with
# t = 2 on 2 ranks (p = 1), t = 2 x p = 2 on 4 ranks and t = 2 x p = 2 x d = 2 on 8 ranks
# (oversubscribed, 20 steps) must give every per-step loss within 1e-5 relative of it, and
# final weights (weights.h5, the whole tensors assembled from the parts) within 1e-5 relative
# per tensor. The one exception is attn.in_proj_bias, compared by absolute difference (1e-5):
# its key third has a zero gradient in exact arithmetic (softmax is invariant to a constant
# per query), so AdamW moves it by normalised rounding noise and its relative difference
# says nothing (the PyTorch twin shows the same against pipetrain at t = 1).
# The bound: splitting a row-parallel product's K-long dot products into t partial sums
# added in tensor-rank order changes each output by at most about K u sum|terms| (u = 2^-24;
# K = 1024 for the MLP's down projection: 6e-5 relative in the worst case, sqrt(K) u = 2e-6
# typically); averaged over every token of the loss and carried through 50 AdamW steps the
# measured per-step difference is about 1e-7 (see docs/ARCHITECTURE.md), so 1e-5 is the
# issue's bound with two orders of margin.
# Also: a repeated t = 2 run is bitwise identical (the group's sum is added in rank order),
# and so is t = 2 x p = 2 against t = 2, with half the point-to-point bytes of a t = 1
# pipeline (the scatter/gather of messages);
# --stop-at-step then --resume at t = 2 continues bitwise; resuming onto another t (2 -> 1,
# 1 -> 2, 2 -> 4) loads bitwise the checkpoint's weights and continues within 1e-5; clipping at t = 2 (the norm over parts
# and replicated tensors) gives every step's loss and grad_norm within 1e-5 of one process,
# and under 2bw (each stage's own norm) every loss within 1e-5 of the t = 1 pipeline;
# the PyTorch twin agrees with the t = 2 run within 1e-5; gpt2_small at t = 2 takes 2 steps
# within 1e-5 of one process in fp32 and completes in bf16; zb-h1 (t = 2 x p = 2) and
# selective recomputation (t = 2) within 1e-5 of one process; sequence parallelism (with dropout,
# selective recomputation, zb-h1) within 1e-5, and fewer activation bytes; with dropout 0.1 in every block
# t = 2 follows one process within 1e-5; the MLP with column- and
# row-parallel linears (`tensor` key) at t = 2 within 1e-5 of one process; and bad grids (t not dividing
# the ranks or the heads) are refused with the key
# named (exit 2); parallel.tensor = 0 plans t with split = "auto"; plan --profile over
# synthetic 6.2B profiles at t = 1, 2, 4, 8 (bench/zb_plan.sh) chooses a grid. About 3 minutes on
# 2 cores: make test runs the core (t = 2 and its grids against one process, resume, the split
# MLP, bad grids, clipping; about one minute), make test-more the rest (lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_tensor.XXXXXX)
trap 'rm -rf "$out"' EXIT
corpus="$out/corpus.txt"
cat $(ls -d /usr/share/games/fortunes/* | grep -v "\.") | head -c 65536 >"$corpus"
base=(input/tinygpt.toml --set data.path="$corpus" --set data.seq_len=64 --set train.batch_size=8
      --set train.log_every=1 --set train.eval_batch_size=16 --set run.output_dir="$out"
      --set parallel.schedule=1f1b --set parallel.microbatches=2 --set checkpoint.at_end=false)

# losses_within A B RTOL: every step of A's metrics.jsonl is in B and within RTOL relative
losses_within() {
  local r
  r=$(python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
def steps(p):
    return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if j.get("type") == "step"}
a, b, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
common = [k for k in a if k in b]
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in common) if common else float("inf")
print(f"{len(common)} {worst:.3e} {'ok' if common and len(common) == len(b) and worst <= tol else 'FAIL'}")
EOF
)
  if [ "${r##* }" = ok ]; then echo "  ok   losses of $(basename "$2") vs $(basename "$1"): ${r% *} steps/worst relative (<= $3)"
  else echo "FAIL losses of $(basename "$2") vs $(basename "$1"): $r (tolerance $3)"; failures=$((failures + 1)); fi
}

# weights_within A B: every tensor within 1e-5 relative, attn.in_proj_bias within 1e-5 absolute
weights_within() {
  "$PT_BIN" compare "$1" "$2" --rtol 1 >"$out/cmp.txt" 2>&1
  if awk '$4 ~ /^[0-9.]+e/ { bad = ($3 == "attn.in_proj_bias") ? ($5 > 1e-5) : ($4 > 1e-5); if (bad) { print; n++ } }
          END { exit n > 0 }' "$out/cmp.txt"; then
    echo "  ok   weights of $(basename "$2") vs $(basename "$1") within 1e-5 (in_proj_bias: absolute)"
  else
    echo "FAIL weights of $(basename "$2") vs $(basename "$1"):"; failures=$((failures + 1))
  fi
}

# refuse NAME NP TEXT ARGS...: a run refused with exit 2 on every rank, saying TEXT
refuse() {  # name np expected-text args...
  local name=$1 np=$2 want=$3; shift 3
  timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np "$np" "$PT_BIN" train "${base[@]}" --set train.max_steps=2 --set run.name="$name" "$@" \
    >"$out/$name.log" 2>&1
  local rc=$?
  expect "$name: refused with exit 2 ($rc) saying '$want'" bash -c "test $rc = 2 && grep -qF \"$want\" '$out/$name.log'"
}

train "$out" ref20 1 "${base[@]}" --set train.max_steps=20 --set parallel.split=[]

# the t = 2 checkpointed runs (both parts)
ck=(--set train.max_steps=20 --set parallel.split=[] --set parallel.tensor=2 --set checkpoint.at_end=true)

# core (make test): t = 2, t = 2 x p = 2 and t = 2 x p = 2 x d = 2 against one process,
# bitwise repeats, the halved messages, resume at t = 2
if in_core; then
train "$out" ref 1 "${base[@]}" --set train.max_steps=50 --set parallel.split=[]
train "$out" t2 2 "${base[@]}" --set train.max_steps=50 --set parallel.split=[] --set parallel.tensor=2
train "$out" t2_again 2 "${base[@]}" --set train.max_steps=50 --set parallel.split=[] --set parallel.tensor=2
train "$out" t2p2 4 "${base[@]}" --set train.max_steps=50 --set parallel.split=[4] --set parallel.tensor=2
train "$out" t2p2d2 8 "${base[@]}" --set train.max_steps=20 --set parallel.split=[4] --set parallel.replicas=[2,2] --set parallel.tensor=2
expect "t = 2 prints the grid" grep -q "^tensor: 2 ranks per group" "$out/t2.log"
expect "summary.json records tensor_parallel 2" grep -q '"tensor_parallel": 2' "$out/t2/summary.json"
expect "tensor rank 1 writes its own files under tensor1/" test -s "$out/t2/tensor1/metrics.jsonl"
losses_within "$out/ref" "$out/t2" 1e-5
losses_within "$out/ref" "$out/t2p2" 1e-5
losses_within "$out/ref20" "$out/t2p2d2" 1e-5
weights_within "$out/ref" "$out/t2"
weights_within "$out/ref" "$out/t2p2"
weights_within "$out/ref20" "$out/t2p2d2"
same_losses "$out/t2" "$out/t2_again"
# Megatron's scatter/gather: between the t = 2 stages each tensor rank sends half of every
# message and the receivers all-gather; the result is the unsplit message exactly (t = 2 x
# p = 2 gives t = 2's losses bit for bit) at half the point-to-point bytes of a t = 1 pipeline
train "$out" p2 2 "${base[@]}" --set train.max_steps=20 --set parallel.split=[4]
same_losses "$out/t2" "$out/t2p2"
p2p() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_p2p_per_sample'])" "$1/summary.json"; }
expect "t = 2 x p = 2 sends half the p2p bytes per sample of p = 2 ($(p2p "$out/t2p2") vs $(p2p "$out/p2"))" \
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (b > 0 and a == b / 2))" "$(p2p "$out/t2p2")" "$(p2p "$out/p2")"
compare "$out/t2/weights.h5" "$out/t2_again/weights.h5" 0

# resume at t = 2 continues bitwise (ck: above)
train "$out" t2_full 2 "${base[@]}" "${ck[@]}"
train "$out" t2_cut 2 "${base[@]}" "${ck[@]}" --stop-at-step 10
train "$out" t2_cut 2 "${base[@]}" "${ck[@]}" --resume "$out/t2_cut"
same_losses "$out/t2_full" "$out/t2_cut"
compare "$out/t2_full/weights.h5" "$out/t2_cut/weights.h5" 0
fi

# more (make test-more): resharding, dropout, zb-h1, recomputation, sequence parallelism
if in_more; then

# resume onto another t reshards: every split tensor laid out whole from the checkpoint's
# parts and cut for the new ones (parameters and AdamW's moments). The load is exact: at
# lr 1e-30 (every update below the weights' last bit) weights.h5 ten steps later is bitwise the
# checkpoint's; at the deck's lr the losses follow the uninterrupted run within 1e-5.
ck1=(--set train.max_steps=20 --set parallel.split=[] --set checkpoint.at_end=true)
train "$out" t1_cut 1 "${base[@]}" "${ck1[@]}" --stop-at-step 10
train "$out" t2_cut10 2 "${base[@]}" "${ck[@]}" --stop-at-step 10
for from in t1_cut t2_cut10; do cp -r "$out/$from" "$out/${from}_keep"; done
tiny_lr=(--set train.lr=1e-30 --set train.min_lr=0)
cp -r "$out/t2_cut10_keep" "$out/r21_still"; cp -r "$out/t1_cut_keep" "$out/r12_still"; cp -r "$out/t2_cut10_keep" "$out/r24_still"
train "$out" r21_still 1 "${base[@]}" "${ck1[@]}" "${tiny_lr[@]}" --resume "$out/r21_still"
train "$out" r12_still 2 "${base[@]}" "${ck[@]}" "${tiny_lr[@]}" --resume "$out/r12_still"
train "$out" r24_still 4 "${base[@]}" "${ck[@]}" "${tiny_lr[@]}" --set parallel.tensor=4 --resume "$out/r24_still"
expect "2 -> 1 says it resharded" grep -q "resharded from parallel.tensor = 2" "$out/r21_still.log"
compare "$out/t2_cut10_keep/weights.h5" "$out/r21_still/weights.h5" 0
compare "$out/t1_cut_keep/weights.h5" "$out/r12_still/weights.h5" 0
compare "$out/t2_cut10_keep/weights.h5" "$out/r24_still/weights.h5" 0
cp -r "$out/t2_cut10_keep" "$out/r21"; cp -r "$out/t1_cut_keep" "$out/r12"
train "$out" r21 1 "${base[@]}" "${ck1[@]}" --resume "$out/r21"
train "$out" r12 2 "${base[@]}" "${ck[@]}" --resume "$out/r12"
losses_within "$out/ref20" "$out/r21" 1e-5
losses_within "$out/ref20" "$out/r12" 1e-5

# dropout 0.1 in every block (the probabilities and the residual branches): each tensor
# rank draws the whole layer's mask for its heads, so t = 2 follows one process within 1e-5
drop=(--set train.max_steps=20 --set parallel.split=[])
for b in 1 2 3 4 5 6; do drop+=(--set model.layers.$b.dropout=0.1); done
train "$out" drop_ref 1 "${base[@]}" "${drop[@]}"
train "$out" drop_t2 2 "${base[@]}" "${drop[@]}" --set parallel.tensor=2
losses_within "$out/drop_ref" "$out/drop_t2" 1e-5

# the split backward (zb-h1: I and W apart) and selective recomputation work per part
train "$out" zb_t2p2 4 "${base[@]}" --set train.max_steps=20 --set parallel.split=[4] --set parallel.tensor=2 \
  --set parallel.schedule=zb-h1
train "$out" rec_t2 2 "${base[@]}" --set train.max_steps=20 --set parallel.split=[] --set parallel.tensor=2 \
  --set parallel.recompute='"selective"'
losses_within "$out/ref20" "$out/zb_t2p2" 1e-5
losses_within "$out/ref20" "$out/rec_t2" 1e-5

# sequence parallelism (sequence_parallel in every block): the norms, residual dropouts and
# adds on half the rows each, reduce-scatters and all-gathers in place of the sums; with
# dropout 0.1 and selective recomputation t = 2 follows one process within 1e-5, and so does
# zb-h1 at t = 2 x p = 2; the kept activations per microbatch (summary.json) fall
seq=()
for b in 1 2 3 4 5 6; do seq+=(--set model.layers.$b.sequence_parallel=true); done
train "$out" seq_t2 2 "${base[@]}" "${drop[@]}" "${seq[@]}" --set parallel.tensor=2 --set parallel.recompute='"selective"'
train "$out" seq_zb 4 "${base[@]}" "${seq[@]}" --set train.max_steps=20 --set parallel.split=[4] --set parallel.tensor=2 \
  --set parallel.schedule=zb-h1
losses_within "$out/drop_ref" "$out/seq_t2" 1e-5
losses_within "$out/ref20" "$out/seq_zb" 1e-5
expect "sequence parallelism keeps fewer activation bytes than t = 2 alone (stage 0 of zb-h1, t = 2 x p = 2)" python3 - \
  "$out/zb_t2p2/summary.json" "$out/seq_zb/summary.json" <<'EOF'
import json, sys
def act(p):
    return json.load(open(p))["per_rank"][0]["activation_bytes_per_microbatch"]
a, b = act(sys.argv[1]), act(sys.argv[2])
print(f"activation bytes per microbatch: t = 2 {a}, with sequence parallelism {b} ({b / a:.3f})")
sys.exit(0 if b < 0.95 * a else 1)
EOF

fi

# core: the MLP's split linears, bad grids, clipping at t = 2
if in_core; then
# linear layers split by their `tensor` key (column, row, column) in the Fashion-MNIST MLP:
# 30 SGD steps at t = 2 within 1e-5 of one process, final weights within 1e-5
mlp=(input/fashion_mlp.toml --set run.output_dir="$out" --set train.max_steps=30 --set train.log_every=1
     --set parallel.split=[] --set checkpoint.at_end=false)
train "$out" mlp_ref 1 "${mlp[@]}"
train "$out" mlp_t2 2 "${mlp[@]}" --set parallel.tensor=2 --set model.layers.1.tensor=column \
  --set model.layers.3.tensor=row --set model.layers.5.tensor=column
losses_within "$out/mlp_ref" "$out/mlp_t2" 1e-5
weights_within "$out/mlp_ref" "$out/mlp_t2"
# bad grids: the key and the values are named, exit 2 on every rank
refuse bad_divide 3 "key 'parallel.tensor': 2 ranks per tensor group do not divide the job's 3 ranks" \
  --set parallel.split=[] --set parallel.tensor=2
refuse bad_heads 3 "must be a multiple of parallel.tensor = 3" --set parallel.split=[] --set parallel.tensor=3

# clipping: the norm over split parts (summed over the group) and replicated tensors (once);
# 0.05 is below every step's norm, so every update is scaled by it
clip=(--set train.max_steps=20 --set parallel.split=[] --set train.clip_grad_norm=0.05)
train "$out" clip_ref 1 "${base[@]}" "${clip[@]}"
train "$out" clip_t2 2 "${base[@]}" "${clip[@]}" --set parallel.tensor=2
losses_within "$out/clip_ref" "$out/clip_t2" 1e-5
expect "clipped t = 2: every step's grad_norm within 1e-5 of one process" python3 - "$out/clip_ref" "$out/clip_t2" <<'EOF'
import json, sys
n = [{j["step"]: j["grad_norm"] for j in map(json.loads, open(d + "/metrics.jsonl")) if j.get("type") == "step"} for d in sys.argv[1:]]
sys.exit(not (len(n[0]) == 20 and all(abs(n[0][k] - n[1][k]) <= 1e-5 * n[0][k] for k in n[0]) and min(n[0].values()) > 0.05))
EOF

fi

# more: asynchronous clipping, the planner's t, the PyTorch twin at t = 2, gpt2_small, 6.2B plans
if in_more; then
# clipping under an asynchronous schedule (2bw, 2 stages): each stage clips its own update
# by its whole tensors' norm (its split parts' sums gathered over the group) against its
# share of the threshold, so t = 2 x p = 2 follows the p = 2 run within 1e-5
aclip=(--set train.max_steps=20 --set parallel.split=[4] --set train.clip_grad_norm=0.05 --set parallel.schedule=2bw
       --set model.layers.7.tie=\"\")  # tied stages need a flush
train "$out" aclip_ref 2 "${base[@]}" "${aclip[@]}"
train "$out" aclip_t2 4 "${base[@]}" "${aclip[@]}" --set parallel.tensor=2
losses_within "$out/aclip_ref" "$out/aclip_t2" 1e-5

# parallel.tensor = 0: split = "auto" plans every t the heads allow (here 1 and 2, each
# profiled as one part) and says which it chose and why; without "auto" 0 is refused
train "$out" auto_t 2 "${base[@]}" --set train.max_steps=3 --set parallel.split='"auto"' --set parallel.tensor=0
expect "tensor = 0 plans t = 1 and t = 2 and names its choice" \
  grep -qE '^plan: parallel.tensor = [12] \(t = 1: .* ms per sample, t = 2: .* ms per sample\)' "$out/auto_t.log"
refuse bad_auto 2 "key 'parallel.tensor': 0 (the planner's choice) needs parallel.split" \
  --set parallel.split=[] --set parallel.tensor=0

# the PyTorch twin against the t = 2 run
PY=${PT_PYTHON:-/usr/bin/python3}
if "$PY" -c 'import torch, h5py, numpy' 2>/dev/null; then
  if timeout --kill-after=5 300 "$PY" tools/pytorch_twin.py input/tinygpt.toml --steps 20 --ranks 2 --tol 1e-5 \
      --set parallel.tensor=2 --set parallel.split=[] --set data.path="$corpus" --set data.seq_len=64 \
      --set train.batch_size=8 --bin "$PT_BIN" >"$out/twin.log" 2>&1; then
    echo "  ok   PyTorch twin vs t = 2: $(grep -h '^max relative per-step loss difference' "$out/twin.log")"
  else
    echo "FAIL PyTorch twin vs t = 2:"; tail -5 "$out/twin.log" | sed 's/^/    | /'; failures=$((failures + 1))
  fi
else
  echo "  skip: PyTorch twin: python3-torch, python3-h5py or numpy is not installed (make deps-dev)"
fi

# gpt2_small (its deck clips at 1.0): 2 steps of 2 samples at t = 2 against one process in
# fp32, and 2 steps in the deck's bf16
g=(input/gpt2_small.toml --set data.path="$corpus" --set train.batch_size=2 --set parallel.microbatches=2
   --set parallel.schedule=1f1b --set parallel.split=[] --set train.eval_batch_size=4 --set train.warmup_steps=0
   --set train.log_every=1 --set checkpoint.at_end=false --set run.output_dir="$out" --set train.max_steps=2)
train "$out" gpt_ref 1 "${g[@]}" --set train.precision=fp32
train "$out" gpt_t2 2 "${g[@]}" --set train.precision=fp32 --set parallel.tensor=2
losses_within "$out/gpt_ref" "$out/gpt_t2" 1e-5
train "$out" gpt_t2_bf16 2 "${g[@]}" --set parallel.tensor=2
expect "gpt2_small bf16 at t = 2 completes" grep -q '"status": "completed"' "$out/gpt_t2_bf16/summary.json"

# plan over profiles at several t (the zero-bubble paper's 6.2B GPT, synthetic): a grid is
# chosen for m = 24, 32, 64, its bubble no larger than 1f1b's, and 1f1b's no smaller than the
# equal-cost (p - 1)/(m + p - 1) (unequal stages only add to it)
OUT="$out/zb" PT_BIN="$PT_BIN" bash bench/zb_plan.sh >"$out/zb_plan.txt" 2>&1
sed 's/^/  /' "$out/zb_plan.txt"
expect "6.2B plans: 3 grids, bubble <= 1f1b's >= (p-1)/(m+p-1)" python3 - "$out/zb_plan.txt" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:2] in ("24", "32", "64")]
ok = len(rows) == 3 and all(float(r[-3]) <= float(r[-2]) + 1e-9 and float(r[-2]) >= float(r[-1]) - 1e-4 for r in rows)
sys.exit(not ok)
EOF
fi
finish
