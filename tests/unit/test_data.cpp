// Data files: IDX (plain and gzip) and HDF5 readers reject bad files with messages that
// name the file and the expected and actual sizes; the happy paths read values back, uint8
// samples are standardised with the training split's statistics, and the synthetic source
// is deterministic.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "data_test_util.hpp"

namespace pt {
namespace {

using namespace test;

// IDX bytes: magic 00 00 08 RANK, big-endian dims, then `data`.
Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08, int rank = -1) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(rank < 0 ? dims.size() : rank)};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!b.empty()) {
    ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- IDX -----------------------------------------------------------------------------

TEST(DataIdx, ReadsPlainAndGzip) {
  TempDir t;
  const Bytes data = noise(2 * 3 * 4);
  write_plain(t.file("a.idx"), idx_bytes({2, 3, 4}, data));
  write_gz(t.file("a.idx.gz"), idx_bytes({2, 3, 4}, data));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    IdxArray a = read_idx(t.file(name), 3);
    EXPECT_EQ(a.dims, std::vector<int64_t>({2, 3, 4})) << name;
    EXPECT_EQ(a.bytes, data) << name;
  }
}

TEST(DataIdx, MultiMemberGzipIsRead) {
  // Concatenated gzip members are one valid gzip file (its trailer describes the last member only).
  TempDir t;
  const Bytes whole = idx_bytes({300}, noise(300, 7));
  write_gz(t.file("p1.gz"), Bytes(whole.begin(), whole.begin() + 100));
  write_gz(t.file("p2.gz"), Bytes(whole.begin() + 100, whole.end()));
  Bytes cat = read_all(t.file("p1.gz")), p2 = read_all(t.file("p2.gz"));
  cat.insert(cat.end(), p2.begin(), p2.end());
  write_plain(t.file("multi.gz"), cat);
  IdxArray a = read_idx(t.file("multi.gz"), 1);
  EXPECT_EQ(a.dims, std::vector<int64_t>({300}));
  EXPECT_EQ(a.bytes, Bytes(whole.begin() + 8, whole.end()));
}

TEST(DataIdx, WrongMagic) {
  TempDir t;
  write_gz(t.file("m.gz"), idx_bytes({2, 2, 2}, noise(8), 0x0D));  // float IDX
  std::string m = error_of([&] { read_idx(t.file("m.gz"), 3); });
  EXPECT_HAS(m, t.file("m.gz") + ": not an IDX file of unsigned bytes: wrong magic 00 00 0d 03 (expected 00 00 08 03)");
  write_plain(t.file("text"), Bytes{'h', 'e', 'l', 'l', 'o'});
  m = error_of([&] { read_idx(t.file("text"), 1); });
  EXPECT_HAS(m, t.file("text") + ": not an IDX file of unsigned bytes: wrong magic 68 65 6c 6c");
}

TEST(DataIdx, WrongRank) {
  TempDir t;
  write_gz(t.file("r.gz"), idx_bytes({6, 4}, noise(24)));
  std::string m = error_of([&] { read_idx(t.file("r.gz"), 3); });
  EXPECT_HAS(m, t.file("r.gz") + ": IDX rank 2, expected 3 (images N x H x W)");
  m = error_of([&] { read_idx(t.file("r.gz"), 1); });
  EXPECT_HAS(m, "IDX rank 2, expected 1 (labels N)");
}

TEST(DataIdx, TruncatedPlain) {
  TempDir t;
  Bytes b = idx_bytes({10, 4, 4}, noise(160));
  b.resize(b.size() - 60);
  write_plain(t.file("t.idx"), b);
  std::string m = error_of([&] { read_idx(t.file("t.idx"), 3); });
  EXPECT_HAS(m, t.file("t.idx") + ": IDX header declares 160 bytes of data (dims 10 x 4 x 4), but the file holds 100 bytes");
  // too long is as wrong as too short
  write_plain(t.file("long.idx"), idx_bytes({10}, noise(12)));
  m = error_of([&] { read_idx(t.file("long.idx"), 1); });
  EXPECT_HAS(m, "declares 10 bytes of data (dims 10), but the file holds 12 bytes");
}

TEST(DataIdx, TruncatedGzipPayload) {
  // A valid gzip stream whose content is shorter (or longer) than the header declares.
  TempDir t;
  Bytes b = idx_bytes({10, 4, 4}, noise(160));
  b.resize(b.size() - 60);
  write_gz(t.file("short.gz"), b);
  std::string m = error_of([&] { read_idx(t.file("short.gz"), 3); });
  EXPECT_HAS(m, t.file("short.gz") + ": truncated or corrupt IDX data");
  EXPECT_HAS(m, "declares 160 bytes after the header, but the file holds 100");
  write_gz(t.file("long.gz"), idx_bytes({10}, noise(15)));
  m = error_of([&] { read_idx(t.file("long.gz"), 1); });
  EXPECT_HAS(m, t.file("long.gz") + ": IDX header declares 10 bytes of data (dims 10), but the file holds 15 bytes");
}

TEST(DataIdx, TruncatedGzipStream) {
  // The compressed file itself cut short (an interrupted download): its trailer is gone, so
  // the size must come from what decompresses, not from the last four bytes.
  TempDir t;
  write_gz(t.file("full.gz"), idx_bytes({20000}, noise(20000, 3)));
  Bytes gz = read_all(t.file("full.gz"));
  ASSERT_GT(gz.size(), 10000u);
  gz.resize(gz.size() / 2);
  write_plain(t.file("cut.gz"), gz);
  std::string m = error_of([&] { read_idx(t.file("cut.gz"), 1); });
  EXPECT_HAS(m, t.file("cut.gz") + ": truncated or corrupt IDX data: the header (dims 20000) declares 20000 bytes after the header, but the file holds ");
  const size_t at = m.find("the file holds ");
  ASSERT_NE(at, std::string::npos);
  const long held = std::strtol(m.c_str() + at + 15, nullptr, 10);
  EXPECT_GE(held, 0);
  EXPECT_LT(held, 20000);
}

TEST(DataIdx, AbsurdDimsRejectedBeforeAllocating) {
  TempDir t;
  // 2^31-1 cubed: rejected from the header alone.
  write_plain(t.file("huge.idx"), idx_bytes({0x7fffffffu, 0x7fffffffu, 0x7fffffffu}, {}));
  std::string m = error_of([&] { read_idx(t.file("huge.idx"), 3); });
  EXPECT_HAS(m, t.file("huge.idx") + ": IDX header declares dims 2147483647 x 2147483647");
  EXPECT_HAS(m, "refusing to allocate");
  // 2^31 x 8 x 2^31 = 2^65 bytes: the product must not wrap around to 0 and slip through.
  write_plain(t.file("wrap.idx"), idx_bytes({0x80000000u, 8, 0x80000000u}, {}));
  m = error_of([&] { read_idx(t.file("wrap.idx"), 3); });
  EXPECT_HAS(m, "dims 2147483648 x 8 x 2147483648");
  EXPECT_HAS(m, "refusing to allocate");
  // Under the global cap, but far more than a small gzip file can hold.
  write_gz(t.file("big.gz"), idx_bytes({60000, 28, 28}, noise(100)));
  m = error_of([&] { read_idx(t.file("big.gz"), 3); });
  EXPECT_HAS(m, t.file("big.gz") + ": IDX header declares 47040000 bytes of data (dims 60000 x 28 x 28), but a gzip file of ");
  EXPECT_HAS(m, "refusing to allocate");
  // A zero dimension.
  write_plain(t.file("zero.idx"), idx_bytes({0, 28, 28}, {}));
  m = error_of([&] { read_idx(t.file("zero.idx"), 3); });
  EXPECT_HAS(m, "IDX dimension 0 = 0 is out of range");
}

TEST(DataIdx, ShortHeader) {
  TempDir t;
  write_plain(t.file("empty"), {});
  std::string m = error_of([&] { read_idx(t.file("empty"), 3); });
  EXPECT_HAS(m, t.file("empty") + ": truncated IDX file: expected a 16-byte header, got 0 bytes");
  write_gz(t.file("hdr.gz"), Bytes{0, 0, 8, 3, 0, 0, 0, 5, 0, 0});
  m = error_of([&] { read_idx(t.file("hdr.gz"), 3); });
  EXPECT_HAS(m, t.file("hdr.gz") + ": truncated IDX header: expected 16 bytes, got 10");
}

TEST(DataIdx, MissingFileIsBadInput) {
  std::string m = error_of([&] { read_idx("/nonexistent/x-idx1-ubyte.gz", 1); });
  EXPECT_HAS(m, "/nonexistent/x-idx1-ubyte.gz: cannot open data file: No such file or directory");
}

// A Fashion-MNIST folder with n_train / n_test samples of h x w.
void write_fashion(const TempDir& t, int n_train, int n_train_labels, int n_test, int h = 4, int w = 4,
                   uint8_t max_label = 9) {
  auto labels = [&](int n, uint32_t seed) {
    Bytes l = noise(static_cast<size_t>(n), seed);
    for (auto& v : l) v = static_cast<uint8_t>(v % (max_label + 1));
    return l;
  };
  const auto H = static_cast<uint32_t>(h), W = static_cast<uint32_t>(w);
  write_gz(t.file("train-images-idx3-ubyte.gz"), idx_bytes({uint32_t(n_train), H, W}, noise(size_t(n_train) * h * w, 11)));
  write_gz(t.file("train-labels-idx1-ubyte.gz"), idx_bytes({uint32_t(n_train_labels)}, labels(n_train_labels, 12)));
  write_gz(t.file("t10k-images-idx3-ubyte.gz"), idx_bytes({uint32_t(n_test), H, W}, noise(size_t(n_test) * h * w, 13)));
  write_gz(t.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({uint32_t(n_test)}, labels(n_test, 14)));
}

const char* kFashionDeck =
    "[data]\nsource = \"fashion-mnist\"\n"
    "[model]\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 10\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

TEST(DataIdx, FashionFolderReadsAndStandardises) {
  TempDir t;
  write_fashion(t, 6, 6, 3);
  Deck d = parse_deck_text(kFashionDeck, "deck.toml", {"data.path=" + t.path()});
  DataSplit s = open_data(d);
  ASSERT_EQ(s.train->size(), 6);
  ASSERT_EQ(s.test->size(), 3);
  EXPECT_EQ(s.train->sample_shape(), Shape::chw(1, 4, 4));
  EXPECT_EQ(s.train->classes(), 10);
  // The test split is standardised with the training split's mean and std.
  const Bytes train = noise(6 * 16, 11), test = noise(3 * 16, 13);
  double sum = 0, sum2 = 0;
  for (uint8_t v : train) sum += v / 255.0, sum2 += (v / 255.0) * (v / 255.0);
  const double mean = sum / train.size(), sd = std::sqrt(sum2 / train.size() - mean * mean);
  std::vector<float> x(16);
  int32_t label = -1;
  const int64_t i = 2;
  s.test->get(&i, 1, x.data(), &label);
  for (int j = 0; j < 16; ++j) EXPECT_NEAR(x[j], (test[2 * 16 + j] / 255.0 - mean) / sd, 1e-4) << j;
  EXPECT_GE(label, 0);
  EXPECT_LE(label, 9);
}

TEST(DataIdx, FashionImageLabelCountMismatch) {
  TempDir t;
  write_fashion(t, 5, 4, 3);
  Deck d = parse_deck_text(kFashionDeck, "deck.toml", {"data.path=" + t.path()});
  std::string m = error_of([&] { open_data(d); });
  EXPECT_HAS(m, t.file("train-images-idx3-ubyte.gz") + ": 5 images, but " + t.file("train-labels-idx1-ubyte.gz") +
                    " has 4 labels");
}

TEST(DataIdx, FashionLabelOutOfRange) {
  TempDir t;
  write_fashion(t, 40, 40, 3, 4, 4, 200);
  Deck d = parse_deck_text(kFashionDeck, "deck.toml", {"data.path=" + t.path()});
  std::string m = error_of([&] { open_data(d); });
  EXPECT_HAS(m, t.file("train-labels-idx1-ubyte.gz") + ": label ");
  EXPECT_HAS(m, "is outside 0..9");
}

TEST(DataIdx, FashionMissingFolderNamesTheDeckKey) {
  Deck d = parse_deck_text(kFashionDeck, "deck.toml", {"data.path=/nonexistent"});
  std::string m = error_of([&] { open_data(d); });
  EXPECT_EQ(m.rfind("command line '--set data.path=/nonexistent': key 'data.path': '/nonexistent' is not a folder", 0), 0u) << m;
  EXPECT_HAS(m, "train-images-idx3-ubyte.gz");
  TempDir t;  // a folder without the files
  Deck e = parse_deck_text(kFashionDeck, "deck.toml", {"data.path=" + t.path()});
  m = error_of([&] { open_data(e); });
  EXPECT_HAS(m, t.file("train-images-idx3-ubyte.gz") + ": cannot open data file: No such file or directory");
}

// ---- HDF5 ----------------------------------------------------------------------------

struct H5Spec {
  hid_t image_type = H5T_NATIVE_UINT8;
  std::vector<hsize_t> image_dims;
  const void* images = nullptr;  // nullptr: zeros
  bool with_labels = true;
  std::vector<hsize_t> label_dims;
  std::vector<int64_t> labels;
  int64_t classes_attr = 0;  // 0: none
};

void write_h5(const std::string& path, const H5Spec& s) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hsize_t total = 1;
  for (auto d : s.image_dims) total *= d;
  const size_t esize = H5Tget_size(s.image_type);
  std::vector<uint8_t> zeros;
  const void* img = s.images;
  if (!img) {
    zeros.assign(static_cast<size_t>(total) * esize, 0);
    img = zeros.data();
  }
  hid_t sp = H5Screate_simple(static_cast<int>(s.image_dims.size()), s.image_dims.data(), nullptr);
  hid_t ds = H5Dcreate2(f, "/images", s.image_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  ASSERT_GE(H5Dwrite(ds, s.image_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, img), 0);
  H5Dclose(ds);
  H5Sclose(sp);
  if (s.with_labels) {
    hid_t lsp = H5Screate_simple(static_cast<int>(s.label_dims.size()), s.label_dims.data(), nullptr);
    hid_t lds = H5Dcreate2(f, "/labels", H5T_STD_I64LE, lsp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(lds, 0);
    ASSERT_GE(H5Dwrite(lds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.labels.data()), 0);
    if (s.classes_attr) {
      hid_t asp = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(lds, "classes", H5T_STD_I64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT64, &s.classes_attr);
      H5Aclose(a);
      H5Sclose(asp);
    }
    H5Dclose(lds);
    H5Sclose(lsp);
  }
  H5Fclose(f);
}

// A simple valid spec: n samples of f uint8 features, labels i % 3.
H5Spec u8_spec(hsize_t n, hsize_t f, const Bytes* data = nullptr) {
  H5Spec s;
  s.image_dims = {n, f};
  s.images = data ? data->data() : nullptr;
  s.label_dims = {n};
  for (hsize_t i = 0; i < n; ++i) s.labels.push_back(static_cast<int64_t>(i % 3));
  return s;
}

std::unique_ptr<Dataset> open_h5(const std::string& path, const std::string& role = "train") {
  std::pair<float, float> stats{0.0f, 0.0f};
  return open_hdf5_dataset(path, true, role, &stats);
}

TEST(DataHdf5, MissingLabels) {
  TempDir t;
  H5Spec s = u8_spec(4, 6);
  s.with_labels = false;
  write_h5(t.file("d.h5"), s);
  std::string m = error_of([&] { open_h5(t.file("d.h5")); });
  EXPECT_HAS(m, t.file("d.h5") + ": dataset /labels is missing");
}

TEST(DataHdf5, WrongRank) {
  TempDir t;
  H5Spec s = u8_spec(4, 6);
  s.image_dims = {4, 2, 3};
  write_h5(t.file("d.h5"), s);
  std::string m = error_of([&] { open_h5(t.file("d.h5")); });
  EXPECT_HAS(m, t.file("d.h5") + ": dataset /images has shape (4, 2, 3); expected (N, F) or (N, C, H, W)");
  H5Spec l = u8_spec(4, 6);
  l.label_dims = {4, 1};
  write_h5(t.file("l.h5"), l);
  m = error_of([&] { open_h5(t.file("l.h5")); });
  EXPECT_HAS(m, t.file("l.h5") + ": dataset /labels has shape (4, 1); expected (4) to match /images (4, 6)");
}

TEST(DataHdf5, LabelImageCountMismatch) {
  TempDir t;
  H5Spec s = u8_spec(4, 6);
  s.label_dims = {3};
  s.labels.resize(3);
  write_h5(t.file("d.h5"), s);
  std::string m = error_of([&] { open_h5(t.file("d.h5")); });
  EXPECT_HAS(m, t.file("d.h5") + ": dataset /labels has shape (3); expected (4) to match /images (4, 6)");
}

TEST(DataHdf5, LabelOutOfRange) {
  TempDir t;
  H5Spec s = u8_spec(4, 6);
  s.labels = {0, 1, 5, 2};
  s.classes_attr = 3;
  write_h5(t.file("d.h5"), s);
  std::string m = error_of([&] { open_h5(t.file("d.h5")); });
  EXPECT_HAS(m, t.file("d.h5") + ": dataset /labels[2] = 5 is outside 0..2");
  H5Spec n = u8_spec(4, 6);
  n.labels = {0, 1, -1, 2};
  write_h5(t.file("n.h5"), n);
  m = error_of([&] { open_h5(t.file("n.h5")); });
  EXPECT_HAS(m, t.file("n.h5") + ": dataset /labels[2] = -1 is outside 0..2");
  H5Spec one = u8_spec(4, 6);
  one.labels = {0, 0, 0, 0};
  write_h5(t.file("one.h5"), one);
  m = error_of([&] { open_h5(t.file("one.h5")); });
  EXPECT_HAS(m, t.file("one.h5") + ": dataset /labels: the largest label is 0; expected labels 0..C-1 with C >= 2");
}

TEST(DataHdf5, WrongTypeAndNotHdf5) {
  TempDir t;
  std::vector<double> d(24, 0.5);
  H5Spec s = u8_spec(4, 6);
  s.image_type = H5T_NATIVE_DOUBLE;
  s.images = d.data();
  write_h5(t.file("f64.h5"), s);
  std::string m = error_of([&] { open_h5(t.file("f64.h5")); });
  EXPECT_HAS(m, t.file("f64.h5") + ": dataset /images must be uint8 or float32");
  write_plain(t.file("text.h5"), Bytes{'n', 'o', 'p', 'e'});
  m = error_of([&] { open_h5(t.file("text.h5")); });
  EXPECT_HAS(m, t.file("text.h5") + ": train data file is missing or not an HDF5 file");
  m = error_of([&] { open_h5(t.file("absent.h5"), "test"); });
  EXPECT_HAS(m, t.file("absent.h5") + ": test data file is missing or not an HDF5 file");
}

TEST(DataHdf5, AbsurdDimsRejectedBeforeAllocating) {
  TempDir t;
  const std::string path = t.file("huge.h5");
  {
    // Chunked datasets of 2^31 x 2^20 bytes: nothing is written, so the file stays small.
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {hsize_t(1) << 31, hsize_t(1) << 20}, chunk[2] = {1, 1024};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    hid_t sp = H5Screate_simple(2, dims, nullptr);
    hid_t ds = H5Dcreate2(f, "/images", H5T_NATIVE_UINT8, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    hid_t lcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t lchunk[1] = {1024};
    H5Pset_chunk(lcpl, 1, lchunk);
    hid_t lsp = H5Screate_simple(1, dims, nullptr);
    hid_t lds = H5Dcreate2(f, "/labels", H5T_NATIVE_INT64, lsp, H5P_DEFAULT, lcpl, H5P_DEFAULT);
    ASSERT_GE(lds, 0);
    for (hid_t d : {lds, ds}) H5Dclose(d);
    for (hid_t x : {lsp, sp}) H5Sclose(x);
    for (hid_t p : {lcpl, dcpl}) H5Pclose(p);
    H5Fclose(f);
  }
  std::string m = error_of([&] { open_h5(path); });
  EXPECT_HAS(m, path + ": dataset /images (2147483648, 1048576) declares more than 17179869184 bytes; refusing to allocate");
}

TEST(DataHdf5, Uint8ReadsBackStandardisedWithTrainingStats) {
  TempDir t;
  const Bytes train = noise(5 * 6, 21), test = noise(2 * 6, 22);
  write_h5(t.file("train.h5"), u8_spec(5, 6, &train));
  write_h5(t.file("test.h5"), u8_spec(2, 6, &test));
  const char* deck =
      "[data]\nsource = \"hdf5\"\ntrain = \"TRAIN\"\ntest = \"TEST\"\n"
      "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 3\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  for (bool normalize : {true, false}) {
    Deck d = parse_deck_text(deck, "deck.toml",
                             {"data.train=" + t.file("train.h5"), "data.test=" + t.file("test.h5"),
                              std::string("data.normalize=") + (normalize ? "true" : "false")});
    DataSplit s = open_data(d);
    ASSERT_EQ(s.train->size(), 5);
    ASSERT_EQ(s.test->size(), 2);
    EXPECT_EQ(s.train->sample_shape(), Shape::vec(6));
    EXPECT_EQ(s.train->classes(), 3);
    double sum = 0, sum2 = 0;
    for (uint8_t v : train) sum += v / 255.0, sum2 += (v / 255.0) * (v / 255.0);
    const double mean = normalize ? sum / train.size() : 0.0;
    const double sd = normalize ? std::sqrt(sum2 / train.size() - mean * mean) : 1.0;
    std::vector<float> x(6);
    int32_t label = -1;
    for (int64_t i : {0, 1}) {
      s.test->get(&i, 1, x.data(), &label);
      EXPECT_EQ(label, i % 3);
      for (int j = 0; j < 6; ++j) EXPECT_NEAR(x[j], (test[i * 6 + j] / 255.0 - mean) / sd, 1e-4) << "normalize " << normalize;
    }
    const int64_t k = 4;
    s.train->get(&k, 1, x.data(), &label);
    EXPECT_EQ(label, 1);
    for (int j = 0; j < 6; ++j) EXPECT_NEAR(x[j], (train[4 * 6 + j] / 255.0 - mean) / sd, 1e-4);
  }
}

TEST(DataHdf5, Float32ReadsBackAsStored) {
  TempDir t;
  std::vector<float> v(3 * 2 * 2 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1.5f;
  H5Spec s;
  s.image_type = H5T_NATIVE_FLOAT;
  s.image_dims = {3, 2, 2, 2};
  s.images = v.data();
  s.label_dims = {3};
  s.labels = {2, 0, 1};
  s.classes_attr = 4;
  write_h5(t.file("f.h5"), s);
  auto ds = open_h5(t.file("f.h5"));
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->sample_shape(), Shape::chw(2, 2, 2));
  EXPECT_EQ(ds->classes(), 4);  // from the attribute, not the largest label
  std::vector<float> x(16);
  int32_t labels[2];
  const int64_t idx[2] = {2, 0};
  ds->get(idx, 2, x.data(), labels);
  EXPECT_EQ(labels[0], 1);
  EXPECT_EQ(labels[1], 2);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(x[j], v[16 + j]);
    EXPECT_EQ(x[8 + j], v[j]);
  }
}

TEST(DataHdf5, SplitsMustAgree) {
  TempDir t;
  const char* deck =
      "[data]\nsource = \"hdf5\"\ntrain = \"x\"\ntest = \"y\"\n"
      "[model]\n[[model.layers]]\ntype = \"linear\"\nout = 3\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  auto open = [&](const std::string& train, const std::string& test) {
    Deck d = parse_deck_text(deck, "deck.toml", {"data.train=" + t.file(train), "data.test=" + t.file(test)});
    return open_data(d);
  };
  write_h5(t.file("u8.h5"), u8_spec(4, 6));
  write_h5(t.file("u8_f5.h5"), u8_spec(4, 5));
  std::vector<float> fl(24, 0.5f);
  H5Spec f = u8_spec(4, 6);
  f.image_type = H5T_NATIVE_FLOAT;
  f.images = fl.data();
  write_h5(t.file("f32.h5"), f);
  H5Spec more = u8_spec(4, 6);
  more.labels = {0, 1, 2, 7};
  write_h5(t.file("more.h5"), more);

  std::string m = error_of([&] { open("u8.h5", "u8_f5.h5"); });
  EXPECT_HAS(m, t.file("u8_f5.h5") + ": sample shape [5] differs from the training file " + t.file("u8.h5") + " [6]");
  m = error_of([&] { open("f32.h5", "u8.h5"); });
  EXPECT_HAS(m, t.file("u8.h5") + ": dataset /images is uint8, but the training file " + t.file("f32.h5") + " holds float32");
  m = error_of([&] { open("u8.h5", "f32.h5"); });
  EXPECT_HAS(m, "is float32, but the training file");
  m = error_of([&] { open("u8.h5", "more.h5"); });
  EXPECT_HAS(m, t.file("more.h5") + ": labels reach class 7, but the training file " + t.file("u8.h5") + " has 3 classes");
}

// ---- synthetic -----------------------------------------------------------------------

DataSplit synthetic(int64_t seed) {
  Deck d = parse_deck_text(
      "[data]\nsource = \"synthetic\"\nshape = [2, 3, 3]\nclasses = 7\ntrain_samples = 50\ntest_samples = 20\n"
      "[model]\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 7\n"
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
      "deck.toml", {"run.seed=" + std::to_string(seed)});
  return open_data(d);
}

TEST(DataSynthetic, Deterministic) {
  DataSplit a = synthetic(5), b = synthetic(5), c = synthetic(6);
  EXPECT_EQ(a.train->size(), 50);
  EXPECT_EQ(a.test->size(), 20);
  EXPECT_EQ(a.train->sample_shape(), Shape::chw(2, 3, 3));
  EXPECT_EQ(a.train->classes(), 7);
  const int64_t n = 20, f = 18;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::vector<float> xa(n * f), xb(n * f), xc(n * f), xt(n * f);
  std::vector<int32_t> la(n), lb(n), lc(n), lt(n), lonly(n);
  a.train->get(idx.data(), n, xa.data(), la.data());
  b.train->get(idx.data(), n, xb.data(), lb.data());
  c.train->get(idx.data(), n, xc.data(), lc.data());
  a.test->get(idx.data(), n, xt.data(), lt.data());
  a.train->get_labels(idx.data(), n, lonly.data());
  EXPECT_EQ(xa, xb);  // same seed, same samples
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, lonly);
  EXPECT_NE(xa, xc);  // another seed
  EXPECT_NE(xa, xt);  // the test split is other samples
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GE(la[i], 0);
    EXPECT_LT(la[i], 7);
    for (int64_t j = i + 1; j < n; ++j)  // different sample ids differ
      EXPECT_NE(std::vector<float>(xa.begin() + i * f, xa.begin() + (i + 1) * f),
                std::vector<float>(xa.begin() + j * f, xa.begin() + (j + 1) * f));
  }
  for (float v : xa) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
  // A sample does not depend on which batch it is read in.
  const int64_t one = 13;
  std::vector<float> x13(f);
  int32_t l13;
  a.train->get(&one, 1, x13.data(), &l13);
  EXPECT_EQ(x13, std::vector<float>(xa.begin() + 13 * f, xa.begin() + 14 * f));
  EXPECT_EQ(l13, la[13]);
}

}  // namespace
}  // namespace pt
