// Layer factory and the pieces shared by all layers.
#include "pipetrain/layers.hpp"

#include "layer_types.hpp"
#include "pipetrain/error.hpp"

namespace pt {

int64_t Layer::num_params() const {
  int64_t n = 0;
  for (auto& p : params()) n += p.size;
  return n;
}

void Layer::shape_error(const std::string& msg) const {
  fail(Exit::bad_input,
       spec_.where + ": layer " + std::to_string(spec_.index) + " '" + spec_.name + "' (" + spec_.type + "): " + msg,
       true);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& s, const Shape& in, const std::string& prev_desc) {
  auto need_rank = [&](int rank, const char* what) {
    if (in.rank != rank)
      fail(Exit::bad_input,
           s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): expects " + what +
               " input, but " + prev_desc + " outputs " + in.str() +
               (rank == 1 ? "; add a flatten layer before it" : ""),
           true);
  };
  if (s.type == "linear") { need_rank(1, "a flat [F]"); return std::make_unique<layers::Linear>(s, in); }
  if (s.type == "conv2d") { need_rank(3, "an image [C, H, W]"); return std::make_unique<layers::Conv2d>(s, in); }
  if (s.type == "maxpool2d" || s.type == "avgpool2d") {
    need_rank(3, "an image [C, H, W]");
    return std::make_unique<layers::Pool2d>(s, in);
  }
  if (s.type == "relu") return std::make_unique<layers::Relu>(s, in);
  if (s.type == "gelu") return std::make_unique<layers::Gelu>(s, in);
  if (s.type == "flatten") return std::make_unique<layers::Flatten>(s, in);
  if (s.type == "layernorm") return std::make_unique<layers::LayerNorm>(s, in);
  if (s.type == "dropout") return std::make_unique<layers::Dropout>(s, in);
  if (s.type == "softmax_cross_entropy") {
    need_rank(1, "flat [classes] logits as");
    return std::make_unique<layers::SoftmaxCrossEntropy>(s, in);
  }
  fail(Exit::internal, "make_layer: unhandled type " + s.type);
}

}  // namespace pt
