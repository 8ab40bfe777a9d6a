// In-memory dataset shared by the IDX and HDF5 readers.
#pragma once
#include <utility>

#include "pipetrain/data.hpp"

namespace pt {

class MemoryDataset final : public Dataset {
 public:
  // Either bytes (scaled to [0,1], then (x - mean) * inv_std) or floats (used as stored).
  MemoryDataset(std::string desc, Shape shape, int64_t classes, std::vector<uint8_t> bytes, std::vector<float> floats,
                std::vector<int32_t> labels, float mean, float inv_std);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return shape_; }
  int64_t classes() const override { return classes_; }
  std::string describe() const override { return desc_; }
  void get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const override;
  void get_labels(const int64_t* idx, int64_t n, int32_t* labels) const override;
  bool holds_bytes() const { return !bytes_.empty(); }  // uint8 samples (standardised on read)
  int64_t held_bytes() const override {
    return static_cast<int64_t>(bytes_.size() + 4 * floats_.size() + 4 * labels_.size());
  }
  InputTransform input_transform() const override {
    if (bytes_.empty()) return {};
    return {false, 1.0f / 255.0f, mean_, inv_std_};
  }

 private:
  void scale_bytes(const uint8_t* in, int64_t f, float* out) const;
  std::string desc_;
  Shape shape_;
  int64_t classes_;
  std::vector<uint8_t> bytes_;
  std::vector<float> floats_;
  std::vector<int32_t> labels_;
  float mean_, inv_std_;
};

std::pair<float, float> byte_stats(const std::vector<uint8_t>& b);
// Samples, bytes per sample value (1 or 4) and values per sample of an HDF5 dataset file's
// /images, from its header (what open_hdf5_dataset would hold: samples x values x size, and
// 4 bytes per label).
struct Hdf5Extent {
  int64_t samples = 0, per_sample = 0, elem = 0;
  int64_t held_bytes() const { return samples * per_sample * elem + 4 * samples; }
};
Hdf5Extent hdf5_extent(const std::string& path);

}  // namespace pt
