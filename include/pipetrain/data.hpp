// Datasets and sampling: Fashion-MNIST IDX (gzip'd), HDF5 files, synthetic samples, and the
// deterministic epoch permutation keyed by (seed, epoch).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/shape.hpp"

namespace pt {

// How get() turns a stored sample into the model's input, elementwise in float32:
// x = (raw * scale - mean) * inv_std. uint8 images (Fashion-MNIST, uint8 HDF5) with
// data.normalize: scale 1/255 and the training split's mean and 1/std of the scaled values;
// float data and synthetic samples: the identity. weights.h5 records it.
struct InputTransform {
  bool identity = true;
  float scale = 1.0f, mean = 0.0f, inv_std = 1.0f;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;
  virtual int64_t classes() const = 0;
  virtual std::string describe() const = 0;
  // Samples idx[0..n) as float32 (n * sample_shape().numel(), host) and their labels.
  virtual void get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const = 0;
  virtual void get_labels(const int64_t* idx, int64_t n, int32_t* labels) const = 0;
  virtual InputTransform input_transform() const { return {}; }
};

struct DataSplit {
  std::unique_ptr<Dataset> train, test;
};

// Open the deck's data. Errors name the file and what was expected and found.
DataSplit open_data(const Deck& deck);
// Sample shape and class count without reading the samples (for `check` and planning).
struct DataInfo {
  Shape shape;
  int64_t classes = 0;
};
DataInfo data_info(const Deck& deck);

// Readers, exposed for tests.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};
IdxArray read_idx(const std::string& path, int expected_rank);
// uint8 samples are standardised with *stats (mean, 1/std); when stats->second == 0 they are
// computed from this file first (the training split) and stored for the test split.
std::unique_ptr<Dataset> open_hdf5_dataset(const std::string& path, bool normalize, const std::string& role,
                                           std::pair<float, float>* stats);

// Largest sample array a data file may declare (bytes); larger is rejected before allocating.
constexpr int64_t kMaxDataBytes = int64_t(16) << 30;

// Deterministic shuffling: the permutation of epoch e depends only on (seed, e, n).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace pt
