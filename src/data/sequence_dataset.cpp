// Sequence datasets over a token corpus in memory (text bytes, uint16 or uint32 tokens).
// A sample is a window of seq_len + 1 tokens: its first seq_len are the inputs (token ids as
// exact float32), its last seq_len the labels (the next token at every position). Training
// windows start at offsets drawn from (seed, epoch, sample index), never from the rank;
// validation/test windows start at multiples of seq_len, so each position is predicted once.
// Text splits one corpus: the first floor(95%) of its bytes train, the rest validates.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/rng.hpp"
#include "sequence.hpp"

namespace pt {
namespace {

// Sets the window draws apart from the epoch permutation, which shares Stream::shuffle.
constexpr uint64_t kWindowSalt = 0x77696e646f77ull;  // "window"

// The windows of one split: a region [begin, end) of its corpus.
struct Windows {
  int64_t begin = 0, end = 0, seq_len = 1;
  bool random = false;  // training: offsets keyed by (seed, epoch, i); else consecutive
  uint64_t seed = 0;

  int64_t count() const {
    const int64_t len = end - begin;
    if (random) return len / (seq_len + 1);
    return len > seq_len ? (len - 1) / seq_len : 0;  // the last partial window is dropped
  }
  int64_t start(int64_t i, int64_t epoch) const {
    return begin + (random ? train_window_offset(seed, epoch, i, end - begin, seq_len) : i * seq_len);
  }
};

template <typename Tok>
class SequenceDataset final : public Dataset {
 public:
  // owner: this split counts the corpus in held_bytes (text: the training split; the
  // validation split shares its corpus)
  SequenceDataset(std::shared_ptr<const std::vector<Tok>> corpus, Windows w, int64_t vocab, std::string unit,
                  std::string desc, bool owner = true)
      : corpus_(std::move(corpus)), w_(w), vocab_(vocab), unit_(std::move(unit)), desc_(std::move(desc)), owner_(owner) {}
  int64_t held_bytes() const override { return owner_ ? static_cast<int64_t>(corpus_->size() * sizeof(Tok)) : 0; }
  int64_t size() const override { return w_.count(); }
  Shape sample_shape() const override { return Shape::tokens(w_.seq_len); }
  int64_t classes() const override { return vocab_; }
  std::string describe() const override { return desc_; }
  int64_t label_count() const override { return w_.seq_len; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  std::string token_unit() const override { return unit_; }

  void get(const int64_t* idx, int64_t n, float* x, int32_t* labels) const override {
    const int64_t T = w_.seq_len;
    for (int64_t i = 0; i < n; ++i) {
      const Tok* src = window(idx[i]);
      for (int64_t j = 0; j < T; ++j) x[i * T + j] = static_cast<float>(src[j]);
      if (labels) copy_labels(src, labels + i * T);
    }
  }
  void get_labels(const int64_t* idx, int64_t n, int32_t* labels) const override {
    for (int64_t i = 0; i < n; ++i) copy_labels(window(idx[i]), labels + i * w_.seq_len);
  }

 private:
  const Tok* window(int64_t i) const {
    PT_CHECK(i >= 0 && i < size(), "sample " << i << " outside 0.." << size() - 1 << " of " << desc_);
    return corpus_->data() + w_.start(i, epoch_);
  }
  void copy_labels(const Tok* src, int32_t* out) const {
    for (int64_t j = 0; j < w_.seq_len; ++j) out[j] = static_cast<int32_t>(src[j + 1]);
  }

  std::shared_ptr<const std::vector<Tok>> corpus_;
  Windows w_;
  int64_t vocab_;
  std::string unit_, desc_;
  bool owner_;
  int64_t epoch_ = 0;
};

// A file or folder named by a deck key must exist: the error is located at the key.
void require_path(const Deck& d, const std::string& key, const std::string& path, const std::string& expected) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return;
  const int e = errno;
  fail(e == ENOENT || e == ENOTDIR ? Exit::bad_input : Exit::io,
       d.where(key) + ": key '" + key + "': '" + path + "' cannot be opened (" + std::strerror(e) + "); expected " + expected,
       true);
}

void require_text_path(const Deck& d) {
  const bool fortunes = d.data.path == kFortunesPath;
  require_path(d, "data.path", d.data.path,
               std::string("a plain-text file or a folder of them") +
                   (fortunes ? " (this default comes with the Debian package fortunes: make deps)" : ""));
}

std::string n_of(int64_t n, const std::string& what) { return std::to_string(n) + " " + what; }

// The text corpus's two splits, checked to hold at least kMinWindows windows each.
std::pair<Windows, Windows> text_windows(const std::string& path, int64_t bytes, const Deck& d) {
  const int64_t cut = text_train_bytes(bytes), T = d.data.seq_len;
  const Windows train{0, cut, T, true, static_cast<uint64_t>(d.run.seed)}, val{cut, bytes, T, false, 0};
  if (train.count() < kMinWindows || val.count() < kMinWindows)
    fail(Exit::bad_input, d.where("data.seq_len") + ": key 'data.seq_len': " + path + ": a text corpus of " + n_of(bytes, "bytes") + " is too small for data.seq_len = " +
                              std::to_string(T) + ": its training region (the first 95%, " + n_of(cut, "bytes") + ") holds " +
                              n_of(train.count(), "windows of ") + std::to_string(T + 1) + " bytes and its validation region (the last 5%, " +
                              n_of(bytes - cut, "bytes") + ") " + std::to_string(val.count()) + "; each needs at least " +
                              std::to_string(kMinWindows) + " (lower data.seq_len or add text)", true);
  return {train, val};
}

// The windows of one token file, checked to hold at least kMinWindows.
Windows token_windows(const std::string& path, int64_t n, bool train, const Deck& d) {
  const int64_t T = d.data.seq_len;
  const Windows w{0, n, T, train, static_cast<uint64_t>(d.run.seed)};
  if (w.count() < kMinWindows)
    fail(Exit::bad_input, d.where("data.seq_len") + ": key 'data.seq_len': " + path + ": " + n_of(n, "tokens") + " make " + n_of(w.count(), train ? "training" : "test") +
                              " windows for data.seq_len = " + std::to_string(T) + " (" +
                              (train ? "seq_len + 1 tokens each" : "starting every seq_len tokens") + "); at least " +
                              std::to_string(kMinWindows) + " are needed", true);
  return w;
}

std::string split_text(const Windows& w) {
  return "positions [" + std::to_string(w.begin) + ", " + std::to_string(w.end) + "), " + n_of(w.count(), "windows of ") +
         std::to_string(w.seq_len + 1) + (w.random ? " at random offsets per epoch" : " every " + std::to_string(w.seq_len));
}

template <typename Tok>
std::unique_ptr<Dataset> token_dataset(std::vector<Tok> tokens, const std::string& path, bool train, const Deck& d) {
  const Windows w = token_windows(path, static_cast<int64_t>(tokens.size()), train, d);
  auto corpus = std::make_shared<const std::vector<Tok>>(std::move(tokens));
  return std::make_unique<SequenceDataset<Tok>>(corpus, w, d.data.vocab, "token",
                                                std::string("tokens ") + (train ? "train " : "test ") + path + ": " + split_text(w));
}

std::unique_ptr<Dataset> open_token_split(const std::string& key, const std::string& path, const Deck& d) {
  require_path(d, key, path, "a token file (.bin of uint16, or .h5/.hdf5 with /tokens)");
  const bool train = key == "data.train";
  if (is_hdf5_name(path)) return token_dataset(read_token_h5(path, d.data.vocab), path, train, d);
  return token_dataset(read_token_bin(path, d.data.vocab), path, train, d);
}

int64_t token_count(const std::string& key, const std::string& path, const Deck& d) {
  require_path(d, key, path, "a token file (.bin of uint16, or .h5/.hdf5 with /tokens)");
  return is_hdf5_name(path) ? h5_token_count(path) : bin_token_count(path);
}

}  // namespace

int64_t text_train_bytes(int64_t corpus_bytes) { return corpus_bytes * 95 / 100; }

int64_t train_window_offset(uint64_t seed, int64_t epoch, int64_t i, int64_t region_len, int64_t seq_len) {
  PT_CHECK(seq_len > 0 && region_len > seq_len, "region of " << region_len << " tokens for seq_len " << seq_len);
  const uint64_t key = rng_key(seed, Stream::shuffle, static_cast<uint64_t>(epoch), kWindowSalt);
  return static_cast<int64_t>(rng_below(key, static_cast<uint64_t>(i), static_cast<uint64_t>(region_len - seq_len)));
}

DataSplit open_text_data(const Deck& d) {
  require_text_path(d);
  auto corpus = std::make_shared<const std::vector<uint8_t>>(read_text_corpus(d.data.path));
  const auto [train, val] = text_windows(d.data.path, static_cast<int64_t>(corpus->size()), d);
  const std::string name = "text " + d.data.path + " (" + n_of(static_cast<int64_t>(corpus->size()), "bytes") + ")";
  DataSplit s;
  s.train = std::make_unique<SequenceDataset<uint8_t>>(corpus, train, kTextVocab, "byte", name + " train: " + split_text(train));
  s.test = std::make_unique<SequenceDataset<uint8_t>>(corpus, val, kTextVocab, "byte", name + " validation: " + split_text(val),
                                                      false);
  return s;
}

DataSplit open_token_data(const Deck& d) {
  DataSplit s;
  s.train = open_token_split("data.train", d.data.train, d);
  s.test = open_token_split("data.test", d.data.test, d);
  return s;
}

DataInfo sequence_data_info(const Deck& d) {
  const int64_t T = d.data.seq_len;
  DataInfo i;
  if (d.data.source == DataSource::text) {
    require_text_path(d);
    const int64_t bytes = stat_text_corpus(d.data.path).total;
    const auto [train, val] = text_windows(d.data.path, bytes, d);
    i = {Shape::tokens(T), kTextVocab, T, "byte"};
    i.train_samples = train.count(), i.test_samples = val.count(), i.held_bytes = bytes;
    return i;
  }
  const int64_t ntrain = token_count("data.train", d.data.train, d), ntest = token_count("data.test", d.data.test, d);
  i = {Shape::tokens(T), d.data.vocab, T, "token"};
  i.train_samples = token_windows(d.data.train, ntrain, true, d).count();
  i.test_samples = token_windows(d.data.test, ntest, false, d).count();
  i.held_bytes = ntrain * (is_hdf5_name(d.data.train) ? 4 : 2) + ntest * (is_hdf5_name(d.data.test) ? 4 : 2);
  return i;
}

}  // namespace pt
