// Text and token data (docs/DATA.md): sequence and token shapes; labels are the inputs
// shifted by one; training windows depend only on (seed, epoch, sample) and stay inside the
// first 95% of a text corpus, validation windows tile the last 5%; token ids are exact
// floats; .bin and HDF5 token files are read and checked against the vocabulary; corpus
// folders skip *.dat, hidden files and symlinks; bad inputs are located errors; weights.h5's
// `classes` of a token model is its vocabulary.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../../src/util/h5.hpp"
#include "data_test_util.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/report.hpp"

namespace pt {
namespace {

using namespace test;

const char* kModel =
    "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 4\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

Deck text_deck(const std::vector<std::string>& sets) {
  return parse_deck_text(std::string("[data]\nsource = \"text\"\n") + kModel, "deck.toml", sets);
}

Deck token_deck(const std::string& train, const std::string& test, int64_t vocab, int64_t seq_len) {
  return parse_deck_text(std::string("[data]\nsource = \"tokens\"\n") + kModel, "deck.toml",
                         {"data.train=" + train, "data.test=" + test, "data.vocab=" + std::to_string(vocab),
                          "data.seq_len=" + std::to_string(seq_len)});
}

// Sample i of a dataset: its inputs (as floats) and labels.
struct Sample {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Sample sample(const Dataset& ds, int64_t i) {
  const int64_t T = ds.sample_shape().numel();
  Sample s{std::vector<float>(static_cast<size_t>(T)), std::vector<int32_t>(static_cast<size_t>(ds.label_count()))};
  ds.get(&i, 1, s.x.data(), s.y.data());
  return s;
}

// The window of T + 1 bytes at `at` as the (inputs, labels) it must produce.
Sample expected(const Bytes& corpus, int64_t at, int64_t T) {
  Sample s;
  for (int64_t j = 0; j < T; ++j) {
    s.x.push_back(static_cast<float>(corpus[static_cast<size_t>(at + j)]));
    s.y.push_back(corpus[static_cast<size_t>(at + j + 1)]);
  }
  return s;
}

// Little-endian uint16 bytes of `tokens`, as nanoGPT's prepare scripts write them.
Bytes le16(const std::vector<uint16_t>& tokens) {
  Bytes b;
  for (uint16_t t : tokens) b.push_back(static_cast<uint8_t>(t & 0xff)), b.push_back(static_cast<uint8_t>(t >> 8));
  return b;
}

void write_tokens_h5(const std::string& path, const std::vector<int64_t>& tokens, hid_t file_type = H5T_STD_I32LE) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hsize_t n = tokens.size();
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t ds = H5Dcreate2(f, "/tokens", file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()), 0);
  H5Dclose(ds);
  H5Sclose(sp);
  H5Fclose(f);
}

void expect_info(const DataInfo& info, int64_t T, int64_t vocab, const std::string& unit) {
  EXPECT_EQ(info.shape, Shape::tokens(T));
  EXPECT_EQ(info.classes, vocab);
  EXPECT_EQ(info.label_count, T);
  EXPECT_EQ(info.token_unit, unit);
}

std::vector<uint16_t> ramp16(size_t n, uint32_t vocab) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((i * 7919u) % vocab);
  return t;
}

// ---- shapes --------------------------------------------------------------------------

TEST(TextShape, SequenceAndTokenShapes) {
  const Shape s = Shape::seq(5, 7);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.T(), 5);
  EXPECT_EQ(s.D(), 7);
  EXPECT_EQ(s.numel(), 35);
  EXPECT_EQ(s.str(), "[5, 7]");
  EXPECT_FALSE(s.is_tokens);
  const Shape t = Shape::tokens(9);
  EXPECT_EQ(t.rank, 1);
  EXPECT_TRUE(t.is_tokens);
  EXPECT_EQ(t.T(), 9);
  EXPECT_EQ(t.numel(), 9);
  EXPECT_EQ(t.str(), "[9] tokens");
  EXPECT_NE(t, Shape::vec(9));  // token ids are not features
  EXPECT_EQ(Shape::vec(9).str(), "[9]");
  EXPECT_EQ(t, Shape::tokens(9));
  EXPECT_NE(s, Shape::seq(7, 5));
  EXPECT_NE(Shape::seq(5, 7), Shape::chw(5, 7, 1));
}

// ---- text ----------------------------------------------------------------------------

TEST(TextData, LabelsAreInputsShiftedByOne) {
  TempDir t;
  const Bytes corpus = noise(4000, 3);
  write_plain(t.file("c.txt"), corpus);
  DataSplit s = open_data(text_deck({"data.path=" + t.file("c.txt"), "data.seq_len=16", "run.seed=11"}));
  const int64_t T = 16, cut = 3800;  // floor(0.95 * 4000)
  EXPECT_EQ(s.train->sample_shape(), Shape::tokens(T));
  EXPECT_EQ(s.train->label_count(), T);
  EXPECT_EQ(s.train->classes(), 256);
  EXPECT_EQ(s.train->token_unit(), "byte");
  EXPECT_EQ(s.test->token_unit(), "byte");
  EXPECT_EQ(s.train->size(), cut / (T + 1));
  s.train->set_epoch(2);
  for (int64_t i : {0, 1, 50, 222}) {
    const Sample a = sample(*s.train, i);
    for (int64_t j = 0; j + 1 < T; ++j) EXPECT_EQ(a.y[j], static_cast<int32_t>(a.x[j + 1])) << i << " " << j;
    const int64_t o = train_window_offset(11, 2, i, cut, T);
    const Sample e = expected(corpus, o, T);
    EXPECT_EQ(a.x, e.x) << "sample " << i;
    EXPECT_EQ(a.y, e.y) << "sample " << i;
  }
  std::vector<int32_t> only(static_cast<size_t>(T));
  const int64_t i = 50;
  s.train->get_labels(&i, 1, only.data());
  EXPECT_EQ(only, sample(*s.train, 50).y);
  std::vector<float> x(static_cast<size_t>(T));
  s.train->get(&i, 1, x.data(), nullptr);  // labels are optional
  EXPECT_EQ(x, sample(*s.train, 50).x);
}

TEST(TextData, WindowsDependOnlyOnSeedEpochAndSample) {
  TempDir t;
  write_plain(t.file("c.txt"), noise(20000, 5));
  const std::vector<std::string> sets = {"data.path=" + t.file("c.txt"), "data.seq_len=12", "run.seed=4"};
  DataSplit a = open_data(text_deck(sets)), b = open_data(text_deck(sets));
  DataSplit other_seed = open_data(text_deck({sets[0], sets[1], "run.seed=5"}));
  const int64_t n = a.train->size();
  ASSERT_GT(n, 100);
  // Read in another order and batch composition, after visiting other epochs: same samples.
  a.train->set_epoch(3);
  b.train->set_epoch(9);
  b.train->set_epoch(3);
  const std::vector<int64_t> idx = {7, 0, 99, 7};
  std::vector<float> xb(idx.size() * 12);
  std::vector<int32_t> yb(idx.size() * 12);
  b.train->get(idx.data(), static_cast<int64_t>(idx.size()), xb.data(), yb.data());
  for (size_t k = 0; k < idx.size(); ++k) {
    const Sample s = sample(*a.train, idx[k]);
    EXPECT_EQ(s.x, std::vector<float>(xb.begin() + k * 12, xb.begin() + (k + 1) * 12)) << k;
    EXPECT_EQ(s.y, std::vector<int32_t>(yb.begin() + k * 12, yb.begin() + (k + 1) * 12)) << k;
  }
  EXPECT_EQ(train_window_offset(4, 3, 17, 19000, 12), train_window_offset(4, 3, 17, 19000, 12));
  // Another epoch or another seed moves (nearly) every window.
  int moved_epoch = 0, moved_seed = 0;
  other_seed.train->set_epoch(3);
  for (int64_t i = 0; i < 100; ++i) {
    moved_epoch += train_window_offset(4, 3, i, 19000, 12) != train_window_offset(4, 4, i, 19000, 12);
    moved_seed += sample(*a.train, i).x != sample(*other_seed.train, i).x;
  }
  EXPECT_GE(moved_epoch, 95);
  EXPECT_GE(moved_seed, 95);
  b.train->set_epoch(4);
  EXPECT_NE(sample(*a.train, 7).x, sample(*b.train, 7).x);
  // The validation split does not depend on the epoch.
  const Sample v = sample(*a.test, 3);
  a.test->set_epoch(8);
  EXPECT_EQ(sample(*a.test, 3).x, v.x);
}

TEST(TextData, ValidationIsTheLastFivePercentAndTrainingNeverReadsIt) {
  // 2001 bytes: training is floor(0.95 * 2001) = 1900 bytes of lowercase letters, validation
  // the last 101 bytes, all uppercase, so any byte a sample reads tells where it came from.
  TempDir t;
  Bytes corpus = noise(2001, 9);
  for (size_t i = 0; i < corpus.size(); ++i) corpus[i] = static_cast<uint8_t>((i < 1900 ? 'a' : 'A') + corpus[i] % 26);
  write_plain(t.file("c.txt"), corpus);
  EXPECT_EQ(text_train_bytes(2001), 1900);
  DataSplit s = open_data(text_deck({"data.path=" + t.file("c.txt"), "data.seq_len=8"}));
  ASSERT_EQ(s.test->size(), (101 - 1) / 8);  // windows every 8 bytes; the partial last one dropped
  for (int64_t k = 0; k < s.test->size(); ++k) {
    const Sample got = sample(*s.test, k), want = expected(corpus, 1900 + 8 * k, 8);
    EXPECT_EQ(got.x, want.x) << "validation window " << k;
    EXPECT_EQ(got.y, want.y) << "validation window " << k;  // positions 1901.. predicted once each
  }
  EXPECT_EQ(s.train->size(), 1900 / 9);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    s.train->set_epoch(epoch);
    for (int64_t i = 0; i < s.train->size(); ++i) {
      const Sample a = sample(*s.train, i);
      for (size_t j = 0; j < a.x.size(); ++j) {
        ASSERT_GE(a.x[j], 'a') << "epoch " << epoch << " sample " << i << " reads validation bytes";
        ASSERT_GE(a.y[j], 'a') << "epoch " << epoch << " sample " << i << " reads validation bytes";
      }
      ASSERT_LT(train_window_offset(1, epoch, i, 1900, 8) + 9, 1901);
    }
  }
}

TEST(TextData, FolderSkipsIndexFilesHiddenFilesAndSymlinks) {
  TempDir t;
  write_plain(t.file("b.txt"), {'B', 'B'});
  write_plain(t.file("a"), {'A', 'A', 'A'});
  write_plain(t.file("a.dat"), {'X'});
  write_plain(t.file(".hidden"), {'H'});
  ASSERT_EQ(symlink("b.txt", t.file("b.u8").c_str()), 0);
  ASSERT_EQ(mkdir(t.file("sub").c_str(), 0755), 0);
  write_plain(t.file("sub/c"), {'C'});
  EXPECT_EQ(text_corpus_files(t.path()), std::vector<std::string>({t.file("a"), t.file("b.txt")}));
  EXPECT_EQ(read_text_corpus(t.path()), Bytes({'A', 'A', 'A', 'B', 'B'}));
  EXPECT_EQ(text_corpus_files(t.file("a.dat")), std::vector<std::string>({t.file("a.dat")}));  // a file named directly
  std::string m = error_of([&] { read_text_corpus(t.file("sub/none")); });
  EXPECT_HAS(m, t.file("sub/none") + ": cannot open text corpus: No such file or directory");
  TempDir empty;
  m = error_of([&] { text_corpus_files(empty.path()); });
  EXPECT_HAS(m, empty.path() + ": no text files in this folder");
  write_plain(empty.file("zero"), {});
  m = error_of([&] { read_text_corpus(empty.path()); });
  EXPECT_HAS(m, empty.path() + ": the text corpus is empty (1 file, 0 bytes)");
}

TEST(TextData, BadPathAndTooSmallCorpusAreLocatedErrors) {
  std::string m = error_of([&] { open_data(text_deck({"data.path=/nonexistent/corpus"})); });
  EXPECT_EQ(m.rfind("command line '--set data.path=/nonexistent/corpus': key 'data.path': '/nonexistent/corpus' cannot be opened "
                    "(No such file or directory)", 0), 0u) << m;
  m = error_of([&] { data_info(text_deck({"data.path=/nonexistent/corpus"})); });
  EXPECT_HAS(m, "key 'data.path': '/nonexistent/corpus' cannot be opened");
  TempDir t;
  write_plain(t.file("small.txt"), noise(1000));
  const Deck d = text_deck({"data.path=" + t.file("small.txt"), "data.seq_len=16"});
  for (auto f : {std::function<void()>([&] { open_data(d); }), std::function<void()>([&] { data_info(d); })}) {
    m = error_of(f);
    EXPECT_HAS(m, t.file("small.txt") + ": a text corpus of 1000 bytes is too small for data.seq_len = 16: its training region "
                  "(the first 95%, 950 bytes) holds 55 windows of 17 bytes and its validation region (the last 5%, 50 bytes) 3; "
                  "each needs at least 4");
  }
  EXPECT_EQ(data_info(text_deck({"data.path=" + t.file("small.txt"), "data.seq_len=12"})).label_count, 12);
  // the oversized data.seq_len is named where it was set: the deck's file:line, or the --set
  m = error_of([&] { open_data(d); });
  EXPECT_EQ(m.rfind("command line '--set data.seq_len=16': key 'data.seq_len': " + t.file("small.txt") + ": a text corpus", 0), 0u) << m;
  const Deck in_file = parse_deck_text(std::string("[data]\nsource = \"text\"\nseq_len = 16\n") + kModel, "deck.toml",
                                       {"data.path=" + t.file("small.txt")});
  m = error_of([&] { data_info(in_file); });
  EXPECT_EQ(m.rfind("deck.toml:3:11: key 'data.seq_len': " + t.file("small.txt") + ": a text corpus of 1000 bytes", 0), 0u) << m;
}

TEST(TextData, FortunesIsTheDefault) {
  const Deck d = text_deck({});
  EXPECT_EQ(d.data.path, "/usr/share/games/fortunes");
  EXPECT_EQ(d.data.vocab, 256);
  EXPECT_EQ(d.data.seq_len, 128);
  EXPECT_EQ(text_deck({"data.path=/x"}).data.path, "/x");  // a path given is kept
  namespace fs = std::filesystem;
  if (!fs::is_directory(kFortunesPath)) GTEST_SKIP() << kFortunesPath << " missing (apt-get install fortunes)";
  int64_t bytes = 0;  // the corpus as the spec defines it, counted independently
  for (const auto& e : fs::directory_iterator(kFortunesPath)) {
    const std::string name = e.path().filename().string();
    const bool skip = name[0] == '.' || (name.size() >= 4 && name.compare(name.size() - 4, 4, ".dat") == 0);
    if (!skip && e.is_regular_file() && !e.is_symlink()) bytes += static_cast<int64_t>(e.file_size());
  }
  ASSERT_GT(bytes, 1000000);
  expect_info(data_info(d), 128, 256, "byte");
  DataSplit s = open_data(d);
  EXPECT_EQ(s.train->size(), bytes * 95 / 100 / 129);
  EXPECT_EQ(s.test->size(), (bytes - bytes * 95 / 100 - 1) / 128);
  const Sample v = sample(*s.test, 0);
  EXPECT_EQ(v.x.size(), 128u);
  for (float c : v.x) EXPECT_TRUE(c >= 0 && c < 256);
}

// ---- tokens --------------------------------------------------------------------------

TEST(TokenData, BinAndHdf5FilesReadBack) {
  TempDir t;
  const std::vector<uint16_t> train = ramp16(3000, 50304);
  write_plain(t.file("train.bin"), le16(train));
  EXPECT_EQ(read_token_bin(t.file("train.bin"), 50304), train);
  std::vector<int64_t> val(500);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<int64_t>((i * 31) % 50304);
  write_tokens_h5(t.file("val.h5"), val);
  const std::vector<uint32_t> back = read_token_h5(t.file("val.h5"), 50304);
  EXPECT_EQ(std::vector<int64_t>(back.begin(), back.end()), val);

  const Deck d = token_deck(t.file("train.bin"), t.file("val.h5"), 50304, 32);
  expect_info(data_info(d), 32, 50304, "token");
  DataSplit s = open_data(d);
  EXPECT_EQ(s.train->size(), 3000 / 33);
  EXPECT_EQ(s.test->size(), (500 - 1) / 32);
  EXPECT_EQ(s.train->classes(), 50304);
  EXPECT_EQ(s.test->token_unit(), "token");
  s.train->set_epoch(1);
  const Sample a = sample(*s.train, 5);
  const int64_t o = train_window_offset(1, 1, 5, 3000, 32);
  for (int64_t j = 0; j < 32; ++j) {
    EXPECT_EQ(a.x[j], static_cast<float>(train[o + j]));
    EXPECT_EQ(a.y[j], train[o + j + 1]);
  }
  const Sample v = sample(*s.test, 2);
  ASSERT_EQ(v.x.size(), 32u);
  for (int64_t j = 0; j < 32; ++j) {
    EXPECT_EQ(v.x[j], static_cast<float>(val[64 + j]));
    EXPECT_EQ(v.y[j], val[64 + j + 1]);
  }
}

TEST(TokenData, IdsAreExactFloats) {
  TempDir t;
  // Ids near the top of a 2^24 vocabulary: float32 holds every one of them exactly.
  std::vector<int64_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = kMaxVocab - 1 - static_cast<int64_t>(i * 3);
  write_tokens_h5(t.file("big.h5"), ids, H5T_STD_U32LE);
  std::vector<uint16_t> small(400);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint16_t>(65535 - i);
  write_plain(t.file("small.bin"), le16(small));
  DataSplit s = open_data(token_deck(t.file("small.bin"), t.file("big.h5"), kMaxVocab, 16));
  for (int64_t k = 0; k < s.test->size(); ++k) {
    const Sample v = sample(*s.test, k);
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(static_cast<int64_t>(v.x[j]), ids[k * 16 + j]);
      EXPECT_EQ(v.y[j], ids[k * 16 + j + 1]);
    }
  }
  const Sample a = sample(*s.train, 0);
  for (float x : a.x) EXPECT_EQ(static_cast<float>(static_cast<int64_t>(x)), x);
  EXPECT_GE(*std::min_element(a.x.begin(), a.x.end()), 65535.0f - 399);
}

TEST(TokenData, VocabularyIsChecked) {
  TempDir t;
  std::vector<uint16_t> tokens = ramp16(600, 100);
  tokens[7] = 100;
  write_plain(t.file("bad.bin"), le16(tokens));
  write_plain(t.file("ok.bin"), le16(ramp16(600, 100)));
  std::string m = error_of([&] { open_data(token_deck(t.file("bad.bin"), t.file("ok.bin"), 100, 8)); });
  EXPECT_HAS(m, t.file("bad.bin") + ": token 7 is 100, outside the vocabulary 0..99 (data.vocab = 100)");
  // HDF5: a negative id, and one past the first read block (positions count across blocks).
  std::vector<int64_t> ids((size_t(1) << 20) + 100, 3);
  ids[(size_t(1) << 20) + 5] = 250;
  write_tokens_h5(t.file("far.h5"), ids);
  m = error_of([&] { read_token_h5(t.file("far.h5"), 100); });
  EXPECT_HAS(m, t.file("far.h5") + ": token 1048581 is 250, outside the vocabulary 0..99");
  write_tokens_h5(t.file("neg.h5"), {1, 2, -4, 5});
  m = error_of([&] { read_token_h5(t.file("neg.h5"), 100); });
  EXPECT_HAS(m, t.file("neg.h5") + ": token 2 is -4, outside the vocabulary 0..99");
}

TEST(TokenData, BadFilesAreLocatedErrors) {
  TempDir t;
  write_plain(t.file("odd.bin"), noise(41));
  std::string m = error_of([&] { read_token_bin(t.file("odd.bin"), 256); });
  EXPECT_HAS(m, t.file("odd.bin") + ": 41 bytes is an odd size; a .bin token file holds little-endian uint16 tokens");
  write_plain(t.file("ok.bin"), le16(ramp16(600, 100)));
  m = error_of([&] { data_info(token_deck(t.file("odd.bin"), t.file("ok.bin"), 256, 8)); });
  EXPECT_HAS(m, t.file("odd.bin") + ": 41 bytes is an odd size");
  m = error_of([&] { open_data(token_deck(t.file("ok.bin"), t.file("missing.bin"), 256, 8)); });
  EXPECT_HAS(m, "key 'data.test': '" + t.file("missing.bin") + "' cannot be opened (No such file or directory)");
  write_plain(t.file("tiny.bin"), le16(ramp16(30, 100)));
  m = error_of([&] { open_data(token_deck(t.file("ok.bin"), t.file("tiny.bin"), 256, 8)); });
  EXPECT_HAS(m, t.file("tiny.bin") + ": 30 tokens make 3 test windows for data.seq_len = 8");
  m = error_of([&] { open_data(token_deck(t.file("tiny.bin"), t.file("ok.bin"), 256, 8)); });
  EXPECT_HAS(m, t.file("tiny.bin") + ": 30 tokens make 3 training windows for data.seq_len = 8");
  EXPECT_EQ(m.rfind("command line '--set data.seq_len=8': key 'data.seq_len': " + t.file("tiny.bin"), 0), 0u) << m;
  write_plain(t.file("notes.h5"), {'n', 'o'});
  m = error_of([&] { read_token_h5(t.file("notes.h5"), 256); });
  EXPECT_HAS(m, t.file("notes.h5") + ": missing or not an HDF5 file");
}

TEST(TokenData, DeckKeys) {
  const std::string base = std::string("[data]\nsource = \"tokens\"\ntrain = \"a.bin\"\ntest = \"b.bin\"\n") + kModel;
  std::string m = error_of([&] { parse_deck_text(base, "deck.toml", {}); });
  EXPECT_HAS(m, "deck.toml:2:10: key 'data.source': \"tokens\" needs data.vocab, the vocabulary size");
  m = error_of([&] { parse_deck_text(base, "deck.toml", {"data.vocab=1"}); });
  EXPECT_HAS(m, "command line '--set data.vocab=1': key 'data.vocab': must be at least 2 for tokens, got 1");
  m = error_of([&] { parse_deck_text(base, "deck.toml", {"data.vocab=16777217"}); });
  EXPECT_HAS(m, "key 'data.vocab': must be in [0, 16777216], got 16777217");
  m = error_of([&] { parse_deck_text(base, "deck.toml", {"data.vocab=50304", "data.seq_len=0"}); });
  EXPECT_HAS(m, "key 'data.seq_len': must be > 0, got 0");
  m = error_of([&] { parse_deck_text(base, "deck.toml", {"data.vocab=50304", "data.test=\"\""}); });
  EXPECT_HAS(m, "key 'data.source': \"tokens\" needs data.train and data.test files");
  m = error_of([&] { text_deck({"data.vocab=300"}); });
  EXPECT_HAS(m, "key 'data.vocab': text has a fixed vocabulary of 256 (one token per byte), got 300");
  // The effective deck reads back the same; seq_len and vocab are part of the model.
  const Deck d = parse_deck_text(base, "deck.toml", {"data.vocab=50304", "data.seq_len=64"});
  const Deck back = parse_deck_text(d.effective_toml(), "deck.toml", {});
  EXPECT_EQ(back.data.seq_len, 64);
  EXPECT_EQ(back.data.vocab, 50304);
  EXPECT_EQ(back.model_hash(), d.model_hash());
  EXPECT_NE(parse_deck_text(base, "deck.toml", {"data.vocab=50304", "data.seq_len=65"}).model_hash(), d.model_hash());
  EXPECT_NE(parse_deck_text(base, "deck.toml", {"data.vocab=50257", "data.seq_len=64"}).model_hash(), d.model_hash());
  const Deck text = text_deck({});
  EXPECT_EQ(parse_deck_text(text.effective_toml(), "deck.toml", {}).effective_toml(), text.effective_toml());
}

// weights.h5's root attribute `classes` is what the model predicts: for a token model the
// vocabulary (here 32), not the head's input size (T x D = 6 x 8 = 48).
TEST(TokenData, WeightsH5ClassesIsTheVocabulary) {
  const Deck d = parse_deck_text(
      "[data]\nsource = \"tokens\"\nvocab = 32\nseq_len = 6\ntrain = \"none.bin\"\ntest = \"none.bin\"\n[model]\n"
      "[[model.layers]]\ntype = \"embedding\"\nname = \"tok\"\ndim = 8\n[[model.layers]]\ntype = \"lm_head\"\ntie = \"tok\"\n",
      "tokens.toml", {});
  const Model model(d, Shape::tokens(6), 32);
  std::vector<std::vector<float>> per_layer;
  for (int l = 0; l < model.size(); ++l) per_layer.emplace_back(static_cast<size_t>(model.layer(l).num_params()), 0.5f);
  TempDir t;
  write_weights_h5(t.file("weights.h5"), model, per_layer, d, InputTransform{});
  h5::Handle f = h5::open_file(t.file("weights.h5"));
  EXPECT_EQ(h5::read_attr_int(f.id(), "classes", t.file("weights.h5")), 32);
}

}  // namespace
}  // namespace pt
