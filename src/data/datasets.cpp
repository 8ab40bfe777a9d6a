// In-memory datasets (byte or float samples), the synthetic source, the deck -> data
// mapping (text and tokens: sequence_dataset.cpp), and the epoch permutation.
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "datasets.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/rng.hpp"
#include "sequence.hpp"

namespace pt {

MemoryDataset::MemoryDataset(std::string desc, Shape shape, int64_t classes, std::vector<uint8_t> bytes,
                             std::vector<float> floats, std::vector<int32_t> labels, float mean, float inv_std)
    : desc_(std::move(desc)), shape_(shape), classes_(classes), bytes_(std::move(bytes)), floats_(std::move(floats)),
      labels_(std::move(labels)), mean_(mean), inv_std_(inv_std) {}

// (b / 255 - mean) / std per byte; restrict lets the loop vectorise (a byte may alias anything)
void MemoryDataset::scale_bytes(const uint8_t* __restrict in, int64_t f, float* __restrict out) const {
  const float mean = mean_, inv_std = inv_std_;
  for (int64_t j = 0; j < f; ++j) out[j] = (static_cast<float>(in[j]) * (1.0f / 255.0f) - mean) * inv_std;
}

// Samples are read in a random order, so the next ones' lines are asked for ahead (the
// prefetcher only follows a sample once inside it): about 4% of a Fashion-MNIST MLP step was
// waiting on the first lines of each sample.
void MemoryDataset::get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const {
  const int64_t f = shape_.numel();
  const int64_t row = bytes_.empty() ? f * static_cast<int64_t>(sizeof(float)) : f;
  const char* base = bytes_.empty() ? reinterpret_cast<const char*>(floats_.data()) : reinterpret_cast<const char*>(bytes_.data());
  constexpr int64_t ahead = 2;
  for (int64_t i = 0; i < n; ++i) {
    if (i + ahead < n)
      for (int64_t b = 0; b < row; b += 64) __builtin_prefetch(base + idx[i + ahead] * row + b);
    float* out = x + i * f;
    if (!bytes_.empty()) {
      scale_bytes(bytes_.data() + idx[i] * f, f, out);
    } else {
      std::memcpy(out, floats_.data() + idx[i] * f, sizeof(float) * f);
    }
    if (labels) labels[i] = labels_[idx[i]];
  }
}

void MemoryDataset::get_labels(const int64_t* idx, int64_t n, int32_t* labels) const {
  for (int64_t i = 0; i < n; ++i) labels[i] = labels_[idx[i]];
}

// Mean and 1/std of bytes scaled to [0, 1] (the training split's statistics).
std::pair<float, float> byte_stats(const std::vector<uint8_t>& b) {
  double s = 0, s2 = 0;
  for (uint8_t v : b) {
    const double x = v / 255.0;
    s += x;
    s2 += x * x;
  }
  const double n = static_cast<double>(b.size());
  const double mean = s / n, var = std::max(1e-12, s2 / n - mean * mean);
  return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(var))};
}

namespace {

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(Shape shape, int64_t classes, int64_t n, uint64_t seed, int64_t offset)
      : shape_(shape), classes_(classes), n_(n), seed_(seed), offset_(offset) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return shape_; }
  int64_t classes() const override { return classes_; }
  std::string describe() const override {
    return "synthetic " + shape_.str() + " x " + std::to_string(n_) + ", " + std::to_string(classes_) + " classes";
  }
  void get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const override {
    const int64_t f = shape_.numel();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t key = rng_key(seed_, Stream::synthetic, static_cast<uint64_t>(offset_ + idx[i]));
      for (int64_t j = 0; j < f; ++j) x[i * f + j] = 2.0f * rng_uniform(key, static_cast<uint64_t>(j) + 1) - 1.0f;
    }
    if (labels) get_labels(idx, n, labels);
  }
  void get_labels(const int64_t* idx, int64_t n, int32_t* labels) const override {
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t key = rng_key(seed_, Stream::synthetic, static_cast<uint64_t>(offset_ + idx[i]));
      labels[i] = static_cast<int32_t>(rng_below(key, 0, static_cast<uint64_t>(classes_)));
    }
  }

 private:
  Shape shape_;
  int64_t classes_, n_;
  uint64_t seed_;
  int64_t offset_;
};

std::unique_ptr<Dataset> open_fashion(const std::string& dir, const std::string& prefix, bool normalize,
                                      std::pair<float, float>* stats) {
  const std::string ipath = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  IdxArray img = read_idx(ipath, 3);
  IdxArray lab = read_idx(lpath, 1);
  if (img.dims[0] != lab.dims[0])
    fail(Exit::bad_input, ipath + ": " + std::to_string(img.dims[0]) + " images, but " + lpath + " has " +
                              std::to_string(lab.dims[0]) + " labels; expected one label per image");
  std::vector<int32_t> labels(lab.bytes.begin(), lab.bytes.end());
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] > 9)
      fail(Exit::bad_input, lpath + ": label " + std::to_string(labels[i]) +
                                " of sample " + std::to_string(i) + " is outside 0..9");
  if (stats->second == 0.0f) *stats = normalize ? byte_stats(img.bytes) : std::make_pair(0.0f, 1.0f);
  return std::make_unique<MemoryDataset>("Fashion-MNIST " + prefix + " (" + std::to_string(img.dims[0]) + " x 1x" +
                                             std::to_string(img.dims[1]) + "x" + std::to_string(img.dims[2]) + ")",
                                         Shape::chw(1, img.dims[1], img.dims[2]), 10, std::move(img.bytes),
                                         std::vector<float>{}, std::move(labels), stats->first, stats->second);
}

Shape synthetic_shape(const Deck& d) {
  return d.data.shape.size() == 1 ? Shape::vec(d.data.shape[0])
                                  : Shape::chw(d.data.shape[0], d.data.shape[1], d.data.shape[2]);
}

}  // namespace

DataSplit open_data(const Deck& d) {
  if (d.data.source == DataSource::text) return open_text_data(d);
  if (d.data.source == DataSource::tokens) return open_token_data(d);
  DataSplit s;
  if (d.data.source == DataSource::fashion_mnist) {
    // A missing folder is an input error located at the deck key (exit code 2, as a missing deck).
    struct stat st;
    const bool found = stat(d.data.path.c_str(), &st) == 0;
    const int err = found ? 0 : errno;
    if (!found || !S_ISDIR(st.st_mode))
      fail(Exit::bad_input, d.where("data.path") + ": key 'data.path': '" + d.data.path +
                                "' is not a folder (" + (err ? std::strerror(err) : "not a directory") +
                                "); expected the Fashion-MNIST files train-images-idx3-ubyte.gz, "
                                "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz there");
    std::pair<float, float> stats{0.0f, 0.0f};
    s.train = open_fashion(d.data.path, "train", d.data.normalize, &stats);
    s.test = open_fashion(d.data.path, "t10k", d.data.normalize, &stats);
  } else if (d.data.source == DataSource::hdf5) {
    std::pair<float, float> stats{0.0f, 0.0f};
    s.train = open_hdf5_dataset(d.data.train, d.data.normalize, "train", &stats);
    const bool train_bytes = static_cast<const MemoryDataset&>(*s.train).holds_bytes();
    // The test split is standardised with the training split's statistics, so a uint8
    // test file needs a uint8 training file (and a float32 one a float32 one).
    s.test = open_hdf5_dataset(d.data.test, d.data.normalize, "test", &stats);
    const bool test_bytes = static_cast<const MemoryDataset&>(*s.test).holds_bytes();
    if (train_bytes != test_bytes)
      fail(Exit::bad_input, d.data.test + ": dataset /images is " + (test_bytes ? "uint8" : "float32") +
                                ", but the training file " + d.data.train + " holds " + (train_bytes ? "uint8" : "float32") +
                                "; both splits must have the same type");
    if (s.train->sample_shape() != s.test->sample_shape())
      fail(Exit::bad_input, d.data.test + ": sample shape " + s.test->sample_shape().str() + " differs from the training file " +
                                d.data.train + " " + s.train->sample_shape().str());
    if (s.test->classes() > s.train->classes())
      fail(Exit::bad_input, d.data.test + ": labels reach class " + std::to_string(s.test->classes() - 1) +
                                ", but the training file " + d.data.train + " has " + std::to_string(s.train->classes()) +
                                " classes (0.." + std::to_string(s.train->classes() - 1) + ")");
  } else {
    s.train = std::make_unique<SyntheticDataset>(synthetic_shape(d), d.data.classes, d.data.train_samples,
                                                 static_cast<uint64_t>(d.run.seed), 0);
    s.test = std::make_unique<SyntheticDataset>(synthetic_shape(d), d.data.classes, d.data.test_samples,
                                                static_cast<uint64_t>(d.run.seed), d.data.train_samples);
  }
  return s;
}

namespace {

// Fashion-MNIST's sample count of one split from its IDX header; the published count when
// the file cannot be read (check runs without the data).
int64_t fashion_samples(const std::string& dir, const std::string& prefix, int64_t published) {
  try {
    return read_idx_dims(dir + "/" + prefix + "-labels-idx1-ubyte.gz", 1).at(0);
  } catch (const Error&) {
    return published;
  }
}

}  // namespace

DataInfo data_info(const Deck& d) {
  DataInfo i;
  if (d.data.source == DataSource::fashion_mnist) {
    i = {Shape::chw(1, 28, 28), 10, 1, ""};
    i.train_samples = fashion_samples(d.data.path, "train", 60000);
    i.test_samples = fashion_samples(d.data.path, "t10k", 10000);
    i.held_bytes = (i.train_samples + i.test_samples) * (i.shape.numel() + 4);
  } else if (d.data.source == DataSource::synthetic) {
    i = {synthetic_shape(d), d.data.classes, 1, ""};
    i.train_samples = d.data.train_samples, i.test_samples = d.data.test_samples;
  } else if (d.data.source == DataSource::text || d.data.source == DataSource::tokens) {
    i = sequence_data_info(d);
  } else {
    std::pair<float, float> stats{0.0f, 1.0f};
    auto ds = open_hdf5_dataset(d.data.train, false, "train", &stats);
    i = {ds->sample_shape(), ds->classes(), 1, ""};
    const Hdf5Extent test = hdf5_extent(d.data.test);
    i.train_samples = ds->size(), i.test_samples = test.samples;
    i.held_bytes = ds->held_bytes() + test.held_bytes();
  }
  return i;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  const uint64_t key = rng_key(seed, Stream::shuffle, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng_below(key, static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace pt
