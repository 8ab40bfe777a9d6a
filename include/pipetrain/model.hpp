// The model: the deck's layer chain with inferred shapes, and the layer table that
// `pipetrain check` prints. A stage is a contiguous slice [first, last) of it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/layers.hpp"

namespace pt {

struct Deck;  // deck.hpp

// This rank's place in its tensor group (parallel.tensor): part `rank` of `parts`.
struct TensorShard {
  int parts = 1, rank = 0;
};

class Model {
 public:
  // shard: the layers whose type splits (LayerType::splits_tensor) hold that part of their
  // weights (LayerSpec::tensor_parts, tensor_rank); the others are whole. Default: one process.
  Model(const Deck& deck, Shape input, int64_t classes, TensorShard shard = {});
  int size() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return *layers_[static_cast<size_t>(i)]; }
  Shape input_shape() const { return input_; }
  int64_t classes() const { return classes_; }
  TensorShard shard() const { return shard_; }
  int64_t num_params(int first, int last) const;
  // Model FLOPs of one training sample as model FLOPs utilisation counts them (PaLM, appendix
  // B): 6 N per label position (token), N the parameters with a tied weight counted once,
  // plus each layer's attention_model_flops(). Recomputation is not counted.
  double model_flops_per_sample() const;

  std::string table() const;       // human-readable layer table
  std::string table_json() const;  // the same as a JSON list

 private:
  Shape input_;
  int64_t classes_;
  TensorShard shard_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace pt
