// HDF5 dataset files: /images (N,F) or (N,C,H,W), uint8 or float32, and /labels (N) integers,
// optionally with an integer attribute "classes" on /labels. Dimensions and types are
// checked before anything is allocated; every failure names the file and dataset.
#include <hdf5.h>

#include <algorithm>

#include "datasets.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

// Closes an HDF5 handle when it goes out of scope.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Handle() { if (id >= 0 && close) close(id); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
};

std::vector<int64_t> dims_of(hid_t ds) {
  H5Handle sp(H5Dget_space(ds), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(sp.id);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(sp.id, d.data(), nullptr);
  return std::vector<int64_t>(d.begin(), d.end());
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + ")";
}

}  // namespace

Hdf5Extent hdf5_extent(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Hdf5Extent e;
  if (H5Fis_hdf5(path.c_str()) <= 0) return e;
  H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.id < 0 || H5Lexists(f.id, "/images", H5P_DEFAULT) <= 0) return e;
  H5Handle img(H5Dopen2(f.id, "/images", H5P_DEFAULT), H5Dclose);
  const std::vector<int64_t> d = dims_of(img.id);
  H5Handle t(H5Dget_type(img.id), H5Tclose);
  if (d.empty()) return e;
  e.samples = d[0];
  e.per_sample = 1;
  for (size_t i = 1; i < d.size(); ++i) e.per_sample *= d[i];
  e.elem = H5Tget_size(t.id) == 1 ? 1 : 4;
  return e;
}

std::unique_ptr<Dataset> open_hdf5_dataset(const std::string& path, bool normalize, const std::string& role,
                                           std::pair<float, float>* stats) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // our messages replace HDF5's stack dumps
  if (H5Fis_hdf5(path.c_str()) <= 0)
    fail(Exit::bad_input, path + ": " + role + " data file is missing or not an HDF5 file");
  H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.id < 0) fail(Exit::io, path + ": cannot open HDF5 file");
  for (const char* name : {"/images", "/labels"})
    if (H5Lexists(f.id, name, H5P_DEFAULT) <= 0)
      fail(Exit::bad_input, path + ": dataset " + name + " is missing (expected /images (N,C,H,W) or (N,F) and /labels (N))");
  H5Handle img(H5Dopen2(f.id, "/images", H5P_DEFAULT), H5Dclose);
  H5Handle lab(H5Dopen2(f.id, "/labels", H5P_DEFAULT), H5Dclose);
  auto idims = dims_of(img.id), ldims = dims_of(lab.id);
  if (idims.size() != 2 && idims.size() != 4)
    fail(Exit::bad_input, path + ": dataset /images has shape " + dims_text(idims) + "; expected (N, F) or (N, C, H, W)");
  if (ldims.size() != 1 || ldims[0] != idims[0])
    fail(Exit::bad_input, path + ": dataset /labels has shape " + dims_text(ldims) + "; expected (" + std::to_string(idims[0]) +
                              ") to match /images " + dims_text(idims));
  int64_t per = 1;
  for (size_t i = 1; i < idims.size(); ++i) per *= idims[i];
  if (idims[0] <= 0 || per <= 0)
    fail(Exit::bad_input, path + ": dataset /images has an empty shape " + dims_text(idims));
  H5Handle t(H5Dget_type(img.id), H5Tclose);
  const bool is_u8 = H5Tget_class(t.id) == H5T_INTEGER && H5Tget_size(t.id) == 1 && H5Tget_sign(t.id) == H5T_SGN_NONE;
  const bool is_f32 = H5Tget_class(t.id) == H5T_FLOAT && H5Tget_size(t.id) == 4;
  if (!is_u8 && !is_f32) fail(Exit::bad_input, path + ": dataset /images must be uint8 or float32");
  const int64_t elem = is_u8 ? 1 : 4;
  if (per > kMaxDataBytes / elem || idims[0] > kMaxDataBytes / (per * elem))
    fail(Exit::bad_input, path + ": dataset /images " + dims_text(idims) + " declares more than " +
                              std::to_string(kMaxDataBytes) + " bytes; refusing to allocate");
  H5Handle lt(H5Dget_type(lab.id), H5Tclose);
  if (H5Tget_class(lt.id) != H5T_INTEGER) fail(Exit::bad_input, path + ": dataset /labels must hold integers");

  std::vector<int32_t> labels(static_cast<size_t>(idims[0]));
  if (H5Dread(lab.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0)
    fail(Exit::bad_input, path + ": cannot read dataset /labels (corrupt file?)");
  int64_t classes = 0;
  if (H5Aexists(lab.id, "classes") > 0) {
    H5Handle a(H5Aopen(lab.id, "classes", H5P_DEFAULT), H5Aclose);
    int64_t c = 0;
    if (H5Aread(a.id, H5T_NATIVE_INT64, &c) < 0 || c < 2)
      fail(Exit::bad_input, path + ": attribute /labels@classes must be an integer >= 2");
    classes = c;
  } else {
    classes = 1 + static_cast<int64_t>(*std::max_element(labels.begin(), labels.end()));
    // The class count comes from the training split; a test split may lack some classes.
    if (classes < 2 && role == "train")
      fail(Exit::bad_input, path + ": dataset /labels: the largest label is " + std::to_string(classes - 1) +
                                "; expected labels 0..C-1 with C >= 2 classes (or set the attribute /labels@classes)");
  }
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      fail(Exit::bad_input, path + ": dataset /labels[" + std::to_string(i) + "] = " + std::to_string(labels[i]) +
                                " is outside 0.." + std::to_string(classes - 1));

  std::vector<uint8_t> bytes;
  std::vector<float> floats;
  const size_t total = static_cast<size_t>(idims[0] * per);
  herr_t rc;
  if (is_u8) {
    bytes.resize(total);
    rc = H5Dread(img.id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  } else {
    floats.resize(total);
    rc = H5Dread(img.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, floats.data());
  }
  if (rc < 0) fail(Exit::bad_input, path + ": cannot read dataset /images (corrupt or truncated file)");
  Shape shape = idims.size() == 2 ? Shape::vec(idims[1]) : Shape::chw(idims[1], idims[2], idims[3]);
  if (is_u8 && stats->second == 0.0f) *stats = normalize ? byte_stats(bytes) : std::make_pair(0.0f, 1.0f);
  return std::make_unique<MemoryDataset>("HDF5 " + path + " " + dims_text(idims), shape, classes, std::move(bytes),
                                         std::move(floats), std::move(labels), stats->first, stats->second);
}

}  // namespace pt
