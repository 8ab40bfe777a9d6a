// Where a stage's footprint (memory_model.hpp) comes from: the model, through the engine's
// sizing functions (exact), or a profile's per-layer bytes (no model at hand).
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "pipetrain/error.hpp"
#include "pipetrain/memory_model.hpp"

namespace pt {
namespace {

class ModelFootprints final : public FootprintSource {
 public:
  ModelFootprints(const Model& m, const ModelMemoryInputs& in) : m_(m), in_(in) {}
  int layers() const override { return m_.size(); }

  // Exactly what StageRuntime(..., first..end, unit_samples, eval_mb, split_backward) allocates.
  StageFootprint stage(int first, int end, int64_t unit, bool split, Recompute recompute) const override {
    StageFootprint f;
    f.first = first, f.end = end;
    f.first_stage = first == 0, f.last_stage = end == m_.size();
    f.bf16 = in_.bf16;
    f.train_mb = unit, f.eval_mb = in_.eval_mb;
    f.geo = Stage::geometry(m_, first, end, unit, in_.eval_mb, split, recompute,
                            in_.bf16 ? Precision::bf16 : Precision::fp32);
    f.params = f.geo.num_params, f.state = f.geo.num_state;
    f.optimizer_states = in_.optimizer_states;
    f.optimizer_floats = f.optimizer_states * f.params;
    const Boundary bin = boundary_at_layer(m_, first, -1, in_.bf16), bout = boundary_at_layer(m_, end, 0, in_.bf16);
    f.unit = StagePools::unit_sizes(f.geo.slot_floats, unit, bin, bout, f.first_stage, f.last_stage, unit, in_.labels_per_sample);
    f.eval = StageRuntime::eval_sizes(bin, bout, f.last_stage, in_.eval_mb, in_.labels_per_sample);
    f.in_numel = bin.shape.numel();
    if (in_.bf16)  // the input-gradient products; the model's first layer computes no input gradient
      for (int l = std::max(first, 1); l < end; ++l) f.kept_weight_values += m_.layer(l).product_weight_values();
    if (in_.kernels) kernel_bytes(f, unit);
    return f;
  }

 private:
  // Each convolution's plan at the unit's size (every pass it runs: no data pass for the
  // model's first layer, whose input gradient nobody reads) and at the evaluation's (forward).
  // The kernels cache one plan per shape and activation layout: convolutions of the same
  // geometry (a ResNet's repeated blocks) share it, so each counts once.
  void kernel_bytes(StageFootprint& f, int64_t unit) const {
    Backend& be = *in_.kernels;
    const Precision p = in_.bf16 ? Precision::bf16 : Precision::fp32;
    std::set<std::array<int64_t, 12>> seen;
    auto io = [&](const Layer& layer, const Layer::ConvUse& u, int64_t n) {
      const ImageLayout il = u.keeps_layout ? layer.inner_layout(be, n, p) : ImageLayout::nchw;
      return ConvLayouts{il, il};
    };
    for (int l = f.first; l < f.end; ++l)
      for (const Layer::ConvUse& c : m_.layer(l).convolutions()) {
        const bool data = l > 0;
        const WindowGeom& g = c.g;
        if (!seen.insert({g.c_in, g.h_in, g.w_in, g.c_out, g.h_out, g.w_out, g.kernel, g.stride, g.padding, c.bias, data,
                          c.keeps_layout})
                 .second)
          continue;
        for (const ConvKernelBytes& k : {be.conv_kernel_bytes(c.g, unit, c.bias, true, data, p, io(m_.layer(l), c, unit)),
                                         be.conv_kernel_bytes(c.g, in_.eval_mb, c.bias, false, false, p,
                                                              io(m_.layer(l), c, in_.eval_mb))}) {
          f.kernel_work += k.kept + k.held;
          f.kernel_scratchpad = std::max(f.kernel_scratchpad, k.scratchpad);
          f.kernel_scratch = std::max(f.kernel_scratch, k.scratch);
        }
      }
  }

  const Model& m_;
  ModelMemoryInputs in_;
};

// Per-layer bytes (ChainBytes; a profile measured by pipetrain: stash_bytes = (output unless
// a view + saved extras) x 4 per value, output_bytes = the message, 2 bytes per value of a
// computed bf16 activation), as prefix sums.
class ChainFootprints final : public FootprintSource {
 public:
  explicit ChainFootprints(const ChainBytes& b) : bf16_(b.bf16) {
    const size_t L = b.out.size();
    pmb_ = b.samples > 0 ? b.samples : 1.0;
    input_ = b.input / 4;
    stash_.assign(L + 1, 0.0), params_ = opt_ = kept_ = stash_sel_ = stash_;
    for (size_t i = 0; i < L; ++i) {
      out_.push_back(floats(b.out[i]));
      stash_[i + 1] = stash_[i] + b.stash[i] / 4;
      stash_sel_[i + 1] = stash_sel_[i] + (b.stash_selective.empty() ? b.stash[i] : b.stash_selective[i]) / 4;
      params_[i + 1] = params_[i] + b.params[i] / 4;
      opt_[i + 1] = opt_[i] + b.opt[i] / 4;
      kept_[i + 1] = kept_[i] + (b.params[i] > 0 && i + 1 < L ? out_.back() : 0.0);
    }
  }
  int layers() const override { return static_cast<int>(out_.size()); }

  StageFootprint stage(int first, int end, int64_t unit, bool split, Recompute recompute) const override {
    PT_CHECK(0 <= first && first < end && end <= layers(), "profile stage [" << first << ", " << end << ")");
    const size_t i = static_cast<size_t>(first), j = static_cast<size_t>(end);
    StageFootprint f;
    f.first = first, f.end = end;
    f.first_stage = first == 0, f.last_stage = end == layers();
    f.bf16 = bf16_;
    f.train_mb = unit;
    const double scale = static_cast<double>(unit) / pmb_, params = params_[j] - params_[i];
    const double in = first == 0 ? input_ : out_[i - 1], kept = split ? kept_[j] - kept_[i] : 0.0;
    f.params = static_cast<int64_t>(params);
    if (bf16_) f.kept_weight_values = static_cast<int64_t>(params_[j] - params_[std::max<size_t>(i, 1)]);
    f.optimizer_floats = static_cast<int64_t>(opt_[j] - opt_[i]);
    const std::vector<double>& stash = recompute == Recompute::selective ? stash_sel_ : stash_;
    const double layout = in + stash[j] - stash[i] + kept, out = out_[j - 1];
    const bool full = recompute == Recompute::full;  // a unit keeps input and output; the layout is recomputed
    f.geo.layout_floats = static_cast<int64_t>(layout * scale);
    f.geo.slot_kept_floats = full ? 0 : static_cast<int64_t>(kept * scale);
    f.geo.slot_floats = static_cast<int64_t>((full ? in + out : layout) * scale);
    f.geo.recompute_floats = full ? f.geo.layout_floats : 0;
    StagePools::UnitSizes& u = f.unit;
    u.slot_floats = f.geo.slot_floats;
    const int64_t fin = static_cast<int64_t>(in * scale), fout = static_cast<int64_t>(out_[j - 1] * scale);
    u.grad_in_floats = f.last_stage ? 0 : fout;
    u.grad_out_floats = f.first_stage ? 0 : fin;
    if (bf16_) {
      u.wire_act_in = u.wire_grad_out = f.first_stage ? 0 : (fin + 1) / 2;
      u.wire_act_out = u.wire_grad_in = f.last_stage ? 0 : (fout + 1) / 2;
    }
    f.in_numel = static_cast<int64_t>(in / pmb_);
    return f;
  }

 private:
  // Floats of a message of `bytes`: 2 bytes per value in a bf16 profile.
  double floats(double bytes) const { return bf16_ ? bytes / 2 : bytes / 4; }
  bool bf16_;
  double pmb_ = 1, input_ = 0;
  std::vector<double> out_, stash_, stash_sel_, params_, opt_, kept_;  // per layer; prefix sums (floats at the profile's microbatch)
};

}  // namespace

std::shared_ptr<const FootprintSource> model_footprints(const Model& model, const ModelMemoryInputs& in) {
  return std::make_shared<ModelFootprints>(model, in);
}

std::shared_ptr<const FootprintSource> chain_footprints(const ChainBytes& b) { return std::make_shared<ChainFootprints>(b); }

std::shared_ptr<const FootprintSource> profile_footprints(const Profile& p) {
  ChainBytes b;
  b.input = p.input_bytes;
  for (const LayerProfile& l : p.layers) {
    b.out.push_back(l.output_bytes), b.stash.push_back(l.stash_bytes), b.stash_selective.push_back(l.selective_stash());
    b.params.push_back(l.param_bytes), b.opt.push_back(l.optimizer_bytes);
  }
  b.samples = p.microbatch > 0 ? static_cast<double>(p.microbatch) : 1.0;
  b.bf16 = p.precision == Precision::bf16;
  return chain_footprints(b);
}

}  // namespace pt
