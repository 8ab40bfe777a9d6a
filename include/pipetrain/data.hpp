// Datasets and sampling: Fashion-MNIST IDX (gzip'd), HDF5 files, synthetic samples, text
// (bytes) and pre-tokenised corpora (docs/DATA.md), and the deterministic epoch permutation
// keyed by (seed, epoch).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/shape.hpp"

namespace pt {

struct Deck;  // deck.hpp: open_data and data_info read its [data] (and run.seed, key locations)

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
  // Samples idx[0..n) as float32 (n * sample_shape().numel(), host) and their labels
  // (n * label_count() int32; labels may be null). Token ids are written as exact floats.
  virtual void get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const = 0;
  virtual void get_labels(const int64_t* idx, int64_t n, int32_t* labels) const = 0;
  // Labels per sample: 1 for classification; seq_len for text/tokens (the next token at
  // every position).
  virtual int64_t label_count() const { return 1; }
  // Called on every rank before an epoch's samples are read; text/tokens training splits
  // draw their windows from (seed, epoch, sample index). Others ignore it.
  virtual void set_epoch(int64_t epoch) {}
  // What one label is, for bits per unit: "byte" (text), "token" (tokens), "" (classes).
  virtual std::string token_unit() const { return ""; }
  virtual InputTransform input_transform() const { return {}; }
  // Bytes of samples and labels this dataset keeps in memory (a corpus two splits share is
  // counted by the training split); the memory model's `dataset` category.
  virtual int64_t held_bytes() const { return 0; }
};

struct DataSplit {
  std::unique_ptr<Dataset> train, test;
};

// Open the deck's data. Errors name the file and what was expected and found.
DataSplit open_data(const Deck& deck);
// Sample shape and class count without reading the samples (for `check` and planning);
// text and tokens only look at the files' names and sizes.
struct DataInfo {
  Shape shape;
  int64_t classes = 0;      // classes, or the vocabulary size (text: 256)
  int64_t label_count = 1;  // labels per sample (Dataset::label_count)
  std::string token_unit;   // Dataset::token_unit
  // Samples of each split and the bytes open_data will hold (Dataset::held_bytes of both), from
  // file headers and sizes. Fashion-MNIST files that cannot be read: the published sizes.
  int64_t train_samples = 0, test_samples = 0, held_bytes = 0;
};
DataInfo data_info(const Deck& deck);

// Readers, exposed for tests.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};
IdxArray read_idx(const std::string& path, int expected_rank);
std::vector<int64_t> read_idx_dims(const std::string& path, int expected_rank);  // the header's dimensions only
// uint8 samples are standardised with *stats (mean, 1/std); when stats->second == 0 they are
// computed from this file first (the training split) and stored for the test split.
std::unique_ptr<Dataset> open_hdf5_dataset(const std::string& path, bool normalize, const std::string& role,
                                           std::pair<float, float>* stats);

// Largest sample array a data file may declare (bytes); larger is rejected before allocating.
constexpr int64_t kMaxDataBytes = int64_t(16) << 30;

// ---- text and token corpora (docs/DATA.md) ----
constexpr int64_t kTextVocab = 256;                 // data.source = "text": one token per byte
constexpr int64_t kMaxVocab = int64_t(1) << 24;     // token ids stay exact in float32
constexpr int64_t kMinWindows = 4;                  // windows each split must hold at least
constexpr const char* kFortunesPath = "/usr/share/games/fortunes";  // text default (Debian `fortunes`)

// The files of a text corpus: `path` itself if it is a file; for a folder, its regular files
// sorted by name, skipping hidden names, names ending in ".dat" and symlinks (not recursive).
std::vector<std::string> text_corpus_files(const std::string& path);
// Those files' bytes, concatenated in that order.
std::vector<uint8_t> read_text_corpus(const std::string& path);
// Bytes [0, text_train_bytes(L)) of an L-byte text corpus train, the rest (the last
// contiguous 5%, rounded up) validates: floor(0.95 L).
int64_t text_train_bytes(int64_t corpus_bytes);
// Token files, every id checked < vocab: a raw .bin of little-endian uint16 (nanoGPT's
// train.bin/val.bin), or .h5/.hdf5 with a 1-D integer dataset /tokens.
std::vector<uint16_t> read_token_bin(const std::string& path, int64_t vocab);
std::vector<uint32_t> read_token_h5(const std::string& path, int64_t vocab);
bool is_hdf5_name(const std::string& path);  // ends in .h5 or .hdf5
// Training window of sample i in epoch e: its first position within a region of region_len
// tokens, uniform in [0, region_len - seq_len), keyed by (seed, epoch, i) only; the window
// covers seq_len + 1 tokens (inputs and the next-token labels).
int64_t train_window_offset(uint64_t seed, int64_t epoch, int64_t i, int64_t region_len, int64_t seq_len);

// Deterministic shuffling: the permutation of epoch e depends only on (seed, e, n).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace pt
