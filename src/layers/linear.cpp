// Linear layer: y = x W^T + b with W [out, in] (PyTorch layout). Backward splits: the input
// gradient dx = dy W, and the weight gradient dW += dy^T x, db += column sums of dy.
// `tensor` splits it under parallel.tensor = t (Megatron's ColumnParallelLinear with
// gather_output, RowParallelLinear without input_is_parallel: the layer's input and output
// stay whole, as every layer boundary is): "column" holds out/t rows of W and of the bias,
// all-gathers the output's columns forward and sums the input gradient backward; "row" holds
// in/t columns of W and the whole bias, reads its columns of the input, sums the output
// forward and all-gathers the input gradient's columns backward. Column blocks move through
// the workspace as [t, rows, part] (heads_split / heads_merge with one head per part).
#include <algorithm>
#include <cmath>

#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct LinearSettings : LayerSettings {
  int64_t out = 0;
  bool bias = true;
  TensorSplit tensor = TensorSplit::none;
};

class Linear final : public Layer {
 public:
  Linear(const LayerSpec& s, Shape in)
      : Layer(s, in), split_(s.tensor_parts > 1 ? k(s).tensor : TensorSplit::none), t_(s.tensor_parts),
        map_{in.numel() / (split_ == TensorSplit::row ? t_ : 1), k(s).out / (split_ == TensorSplit::column ? t_ : 1),
             k(s).bias, split_} {
    out_ = Shape::vec(k(s).out);
  }

  std::vector<ParamTensor> params() const override {
    const int64_t in = in_.numel(), out = out_.numel(), n = map_.in * map_.out;
    if (split_ == TensorSplit::none) {
      std::vector<ParamTensor> p = {weight({out, in}, n)};
      if (map_.bias) p.push_back({"bias", {out}, n, out});
      return p;
    }
    const bool col = split_ == TensorSplit::column;
    std::vector<ParamTensor> p = {cut_tensor(weight({map_.out, map_.in}, n), col ? 0 : 1, 1, {out, in})};
    if (map_.bias) p.push_back(col ? cut_tensor({"bias", {map_.out}, n, map_.out}, 0, 1, {out}) : ParamTensor{"bias", {out}, n, out});
    return p;
  }
  void init_params(float* host, uint64_t seed) const override {
    if (split_ != TensorSplit::none) return init_part_of_whole(*this, host, seed);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_.numel()));
    int t = 0;
    for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
  }
  // the column blocks of the input or the output, all parts ([t, rows, part])
  int64_t workspace_per_sample() const override {
    return split_ == TensorSplit::none ? 0 : std::max(in_.numel(), out_.numel());
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float*, int64_t n) const override {
    if (split_ == TensorSplit::none) return map_.forward(c, w, x, y, n);
    if (split_ == TensorSplit::row) return map_.forward(c, w, my_columns(c, x, map_.in, n), y, n);
    map_.forward(c, w, x, c.work + rank() * n * map_.out, n);
    gather_columns(c, c.work, map_.out, y, n);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy, float* dx, float* dw,
                const float*, int64_t n) const override {
    backward_weight(c, w, x, y, dy, dw, nullptr, n);
    backward_input(c, w, x, y, dy, dx, dw, nullptr, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float*, const float*, const float* dy, float* dx, float*,
                      float*, int64_t n) const override {
    if (split_ == TensorSplit::none) return map_.backward_input(c, w, dy, dx, n);
    if (split_ == TensorSplit::column) return map_.backward_input(c, w, my_columns(c, dy, map_.out, n), dx, n);
    if (!dx) return;
    map_.backward_input(c, w, dy, c.work + rank() * n * map_.in, n);
    gather_columns(c, c.work, map_.in, dx, n);
  }
  void backward_weight(const LayerCtx& c, ParamView, const float* x, const float*, const float* dy, float* dw,
                       const float*, int64_t n) const override {
    if (split_ == TensorSplit::none) return map_.backward_weight(c, x, dy, dw, n);
    if (split_ == TensorSplit::column) return map_.backward_weight(c, x, my_columns(c, dy, map_.out, n), dw, n);
    map_.backward_weight(c, my_columns(c, x, map_.in, n), dy, dw, n);
  }
  double flops_forward() const override { return 2.0 * map_.in * map_.out; }
  double flops_backward() const override { return 4.0 * map_.in * map_.out; }
  int64_t product_weight_values() const override { return map_.in * map_.out; }
  // one collective each way (a sum one way, a gather of as many floats the other); the
  // simulator costs both as sums of the larger side
  int tensor_sums() const override { return split_ == TensorSplit::none ? 0 : 1; }
  int64_t tensor_sum_floats() const override { return split_ == TensorSplit::none ? 0 : std::max(in_.numel(), out_.numel()); }

 private:
  static const LinearSettings& k(const LayerSpec& s) { return s.settings_as<LinearSettings>(); }
  // W: its products (RowLinear) read it as operand(dtype) only
  static ParamTensor weight(std::vector<int64_t> shape, int64_t n) {
    ParamTensor w{"weight", std::move(shape), 0, n};
    w.operand_only = true;
    return w;
  }
  int64_t rank() const { return spec_.tensor_rank; }
  // this rank's columns [k part, (k + 1) part) of a whole [n, t part] matrix, via the workspace
  const float* my_columns(const LayerCtx& c, const float* whole, int64_t part, int64_t n) const {
    c.be.heads_split(n, 1, t_, 1, part, whole, c.work);
    return c.work + rank() * n * part;
  }
  // blocks [t, n, part] holding this rank's block -> every block -> whole [n, t part]
  void gather_columns(const LayerCtx& c, float* blocks, int64_t part, float* whole, int64_t n) const {
    PT_CHECK(c.tensor, "a tensor-parallel linear ran without its tensor group");
    c.tensor->allgather(c.be, blocks, n * part * t_, n * part);
    c.be.heads_merge(n, 1, t_, 1, part, blocks, whole);
  }

  TensorSplit split_;
  int t_;
  RowLinear map_;
};

void check_split(const LayerSpec& s, const Shape& in) {
  const TensorSplit split = s.settings_as<LinearSettings>().tensor;
  const int t = s.tensor_parts;
  if (t == 1 || split == TensorSplit::none) return;
  const bool col = split == TensorSplit::column;
  const int64_t len = col ? s.settings_as<LinearSettings>().out : in.numel();
  if (len % t != 0)
    key_error(s, "tensor", std::string("tensor = \"") + enum_name(split) + "\" splits the " + (col ? "outputs" : "inputs") +
                               ", " + std::to_string(len) + " of them, which parallel.tensor = " + std::to_string(t) +
                               " does not divide");
}

LayerType linear_type() {
  LayerType t;
  t.name = "linear";
  t.doc = "y = x W^T + b";
  t.pytorch = "torch.nn.Linear(in, out, bias)";
  t.keys = layer_keys<LinearSettings>({required_key("out", &LinearSettings::out, key_gt(0), "output features"),
                                        key("bias", &LinearSettings::bias, true, "add a bias (default true)"),
                                        key("tensor", &LinearSettings::tensor, TensorSplit::none,
                                            "under parallel.tensor = t: \"column\" splits the outputs (out a multiple of t), "
                                            "\"row\" the inputs (in a multiple of t), \"none\" keeps it whole on every rank "
                                            "(default \"none\")")});
  t.splits_tensor = true;
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 1, "a flat [F]", prev);
    check_split(s, in);
    return std::make_unique<Linear>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(linear, linear_type())

}  // namespace pt::layers
