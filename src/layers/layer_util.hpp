// Internal to src/layers: helpers the layer files share.
#pragma once
#include <cstdint>

#include "pipetrain/layers.hpp"

namespace pt::layers {

// PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), keyed by (seed, layer, tensor).
void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor);

// Geometry of a square window (conv2d, pooling) over an image input, from the spec's
// kernel, stride and padding; c_out = channels (0: c_in). A window that does not fit is a
// located shape error naming the layer.
WindowGeom window_geom(const LayerSpec& s, const Shape& in, int64_t channels);

// A LayerKey whose value lands in LayerSpec member `member`.
#define PT_LAYER_KEY(name, kind, required, range, doc, member) \
  LayerKey { name, kind, required, range, doc, [](LayerSpec& l) -> void* { return &(l.member); } }

}  // namespace pt::layers
