#!/usr/bin/env bash
# weights.h5 carries what rebuilding the model elsewhere needs, and tools/to_pytorch.py uses
# it: the MLP (2-stage 1F1B pipeline) and the CNN (one process) are trained briefly; weights.h5
# records the input shape, the input transform (the training split's mean and std) and each
# layer's deck settings (checked with h5dump, no Python needed); with python3-torch and
# python3-h5py, the torch model rebuilt from deck.toml and weights.h5 scores the test split
# to exactly summary.json's final_test_accuracy (4 decimals). Without them that part is
# skipped with a message, and the tool itself says what to install (exit 4). make test runs all
# but the negative controls, which make test-more runs (tests/mpi/lib.sh: PT_TESTS).
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_to_pytorch.XXXXXX)
trap 'rm -rf "$out"' EXIT
PY=${PT_PYTHON:-/usr/bin/python3}
common=(--set run.output_dir="$out" --set train.log_every=50 --set train.eval_batch_size=1000)

train "$out" mlp 2 input/fashion_mlp.toml "${common[@]}" --set 'parallel.split=[3]' --set parallel.schedule=1f1b \
  --set train.max_steps=150
train "$out" cnn 1 input/fashion_cnn.toml "${common[@]}" --set train.max_steps=30

# the attributes, read with h5dump (hdf5-tools, a runtime dependency)
if in_core; then
attr() { h5dump -A -a "$2" "$1" 2>/dev/null | sed -n 's/^ *(0): *//p' | tr -d '"' | head -1; }
for run in mlp cnn; do
  w="$out/$run/weights.h5"
  mean=$(attr "$w" /input_mean); std=$(attr "$w" /input_std)
  expect "$run: weights.h5 records the input normalisation (mean $mean, std $std: Fashion-MNIST's training split)" \
    awk -v m="$mean" -v s="$std" 'BEGIN { exit !(m > 0.28 && m < 0.29 && s > 0.35 && s < 0.36) }'
  expect "$run: ... the input shape" test "$(h5dump -A -a /input_shape "$w" 2>/dev/null | sed -n 's/^ *(0): *//p')" = "1, 28, 28"
  expect "$run: ... and how to apply it" bash -c "h5dump -A -a /input_transform '$w' | grep -q 'x = (raw \* input_scale - input_mean) \* input_inv_std'"
done
expect "cnn: layer 0 carries its deck settings (conv2d, channels 32, kernel 3, padding 1, stride 1)" \
  bash -c "for a in type:conv2d channels:32 kernel:3 padding:1 stride:1; do
             v=\$(h5dump -A -a /layers/000/\${a%%:*} '$out/cnn/weights.h5' | sed -n 's/^ *(0): *//p' | tr -d '\"')
             [ \"\$v\" = \"\${a#*:}\" ] || { echo \"    \${a%%:*} = \$v\"; exit 1; }
           done"
expect "mlp: layer 1 carries out = 512 and its shapes" \
  bash -c "h5dump -A -a /layers/001/out '$out/mlp/weights.h5' | grep -q '(0): 512' &&
           h5dump -A -a /layers/001/in_shape '$out/mlp/weights.h5' | grep -q '(0): 784'"

# without torch the tool says what to install (simulated: a torch module that fails to import)
mkdir -p "$out/no_torch"
echo 'raise ModuleNotFoundError("No module named torch", name="torch")' >"$out/no_torch/torch.py"
PYTHONPATH="$out/no_torch" "$PY" tools/to_pytorch.py "$out/mlp" >"$out/no_torch.log" 2>&1
rc=$?
expect "without torch: exit 4 naming python3-torch (got $rc)" bash -c "test $rc = 4 && grep -q 'apt-get install python3-torch' '$out/no_torch.log'"

fi

if ! "$PY" -c 'import torch, h5py' 2>/dev/null; then
  echo "  skip: PyTorch comparison: python3-torch or python3-h5py is not installed (make deps-dev)"
  finish
fi
if in_core; then
for run in mlp cnn; do
  timeout --kill-after=5 300 "$PY" tools/to_pytorch.py "$out/$run" --check >"$out/$run.torch.log" 2>&1
  rc=$?
  echo "  $run: $(head -1 "$out/$run.torch.log"); summary.json: $(json_number "$out/$run/summary.json" final_test_accuracy)"
  expect "$run: PyTorch's test accuracy equals summary.json's final_test_accuracy to 4 decimals (exit $rc)" \
    bash -c "test $rc = 0 && grep -q '^matches summary.json final_test_accuracy' '$out/$run.torch.log'"
done
fi

# more: the negative controls (an edited summary.json; x/255 without the recorded mean and std)
if in_more; then
# the comparison has teeth: a different recorded accuracy is found (exit 1)
cp -r "$out/cnn" "$out/cnn_edited"
sed -i -E 's/"final_test_accuracy": [0-9.eE+-]+/"final_test_accuracy": 0.1234/' "$out/cnn_edited/summary.json"
"$PY" tools/to_pytorch.py "$out/cnn_edited" --check >"$out/cnn_edited.torch.log" 2>&1
rc=$?
expect "negative control: an edited summary.json accuracy is reported as different (exit 1, got $rc)" \
  bash -c "test $rc = 1 && grep -q 'DIFFERS from summary.json final_test_accuracy 0.1234' '$out/cnn_edited.torch.log'"
# and the recorded normalisation matters: the usual x/255 alone scores otherwise
plain=$("$PY" - "$out/mlp" <<'PY'
import sys, runpy
sys.argv = ["to_pytorch.py", sys.argv[1]]
mod = runpy.run_path("tools/to_pytorch.py")
np, torch, h5py = mod["need_modules"]()
deck = mod["read_deck"](sys.argv[1])
with h5py.File(sys.argv[1] + "/weights.h5") as wf:
    model, _ = mod["build"](deck, wf, torch)
raw = mod["read_idx"]("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", np)
y = mod["read_idx"]("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", np).astype("int64")
with torch.no_grad():
    logits = model(torch.from_numpy(raw.astype("float32") / 255).reshape(-1, 1, 28, 28))
print(f"{float((logits.argmax(1) == torch.from_numpy(y)).float().mean()):.4f}")
PY
)
want=$(json_number "$out/mlp/summary.json" final_test_accuracy)
expect "without the recorded mean and std (x/255 only) the MLP scores $plain, not $want" \
  awk -v a="$plain" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d > 0.01) }'
fi
finish
