// One [[model.layers]] table as the deck read it: what every layer has (index, type, name,
// where it was written, and what Model resolves), and the settings its type declared and
// read. Only the layer type knows its settings struct (beside its class in src/layers); the
// deck, the model and weights.h5 reach them through the type's keys (layers.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "pipetrain/error.hpp"

namespace pt {

// Base of every layer type's settings struct (the values of its deck keys).
struct LayerSettings {
  virtual ~LayerSettings() = default;
  // Defaults that depend on other keys (pooling: stride = kernel), after the keys are read.
  virtual void finish() {}
  // A violation across keys: {key, message} of the first, or {"", ""}.
  virtual std::pair<std::string, std::string> check() const { return {}; }
  // The name of the layer whose token weight this layer's weight mirrors (lm_head's `tie`),
  // or "" (none). Model resolves it to LayerSpec::tie_layer.
  virtual std::string tie_name() const { return ""; }
};

struct LayerSpec {
  int index = 0;
  std::string type;   // a registered layer type (layers.hpp; docs/MODELS.md)
  std::string name;   // optional label (defaults to "<type><index>")
  std::string where;  // "deck.toml:LINE:COL" of its [[model.layers]] table
  // The values of its type's keys, defaults filled in (never null once the deck read it).
  std::shared_ptr<const LayerSettings> settings;
  // Filled by Model, not deck keys: the data's classes (the vocabulary of token data), and
  // the index of the layer `tie` names (-1: none).
  int64_t classes = 0;
  int tie_layer = -1;
  // Filled by Model under parallel.tensor = t for a layer type that splits (LayerType::
  // splits_tensor): the layer holds part tensor_rank of tensor_parts of its weights
  // (Megatron's column/row split; ParamTensor::split_dim). 1 and 0 otherwise.
  int tensor_parts = 1, tensor_rank = 0;

  // The layer type's own settings struct; only that type's code names S.
  template <class S>
  const S& settings_as() const {
    const S* s = dynamic_cast<const S*>(settings.get());
    PT_CHECK(s, "layer " << index << " '" << name << "' (" << type << "): its settings are not of the type asked for");
    return *s;
  }
  std::string tie_name() const { return settings ? settings->tie_name() : ""; }
};

}  // namespace pt
