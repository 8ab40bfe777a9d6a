// HDF5 helpers: checked calls, Fletcher32-chunked datasets, attributes.
#include "h5.hpp"

#include <algorithm>

#include "pipetrain/error.hpp"

namespace pt::h5 {

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

static void check(herr_t rc, const std::string& file, const std::string& what) {
  if (rc < 0) fail(Exit::io, file + ": HDF5 " + what + " failed");
}

Handle create_file(const std::string& path) {
  quiet();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), path, "set_libver_bounds");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (f < 0) fail(Exit::io, path + ": cannot create HDF5 file");
  return Handle(f, H5Fclose);
}

Handle open_file(const std::string& path) {
  quiet();
  if (H5Fis_hdf5(path.c_str()) <= 0) fail(Exit::bad_input, path + ": missing or not an HDF5 file (bad signature)");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail(Exit::bad_input, path + ": cannot open HDF5 file (corrupt metadata?)");
  return Handle(f, H5Fclose);
}

Handle create_group(hid_t loc, const std::string& name, const std::string& file) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  hid_t g = H5Gcreate2(loc, name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) fail(Exit::io, file + ": cannot create group " + name);
  return Handle(g, H5Gclose);
}

static void write_any(hid_t loc, const std::string& name, hid_t type, const void* data, const std::vector<hsize_t>& dims,
                      bool checksum, const std::string& file) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space) fail(Exit::io, file + ": cannot create dataspace for " + name);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  hsize_t total = 1;
  for (auto d : dims) total *= d;
  if (checksum && total > 0) {
    // chunks of up to 1 Mi elements along the first dimension
    std::vector<hsize_t> chunk = dims;
    hsize_t rest = 1;
    for (size_t i = 1; i < dims.size(); ++i) rest *= std::max<hsize_t>(1, dims[i]);
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], (hsize_t(1) << 20) / std::max<hsize_t>(1, rest)));
    check(H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()), file, "set_chunk " + name);
    check(H5Pset_fletcher32(dcpl.id()), file, "set_fletcher32 " + name);
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle ds(H5Dcreate2(loc, name.c_str(), type, space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT), H5Dclose);
  if (!ds) fail(Exit::io, file + ": cannot create dataset " + name);
  if (total > 0) check(H5Dwrite(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file, "write of dataset " + name);
  if (!ds.close()) fail(Exit::io, file + ": closing dataset " + name + " failed");
}

void write_floats(hid_t loc, const std::string& name, const float* data, const std::vector<hsize_t>& dims, bool checksum,
                  const std::string& file) {
  write_any(loc, name, H5T_NATIVE_FLOAT, data, dims, checksum, file);
}

void write_int64s(hid_t loc, const std::string& name, const int64_t* data, const std::vector<hsize_t>& dims,
                  bool checksum, const std::string& file) {
  write_any(loc, name, H5T_NATIVE_INT64, data, dims, checksum, file);
}

void write_floats64(hid_t loc, const std::string& name, const double* data, const std::vector<hsize_t>& dims,
                    bool checksum, const std::string& file) {
  write_any(loc, name, H5T_NATIVE_DOUBLE, data, dims, checksum, file);
}

bool exists(hid_t loc, const std::string& name) {
  // walk the path so a missing intermediate group is not an error
  std::string cur;
  size_t pos = 0;
  while (true) {
    size_t next = name.find('/', pos + 1);
    cur = name.substr(0, next);
    if (!cur.empty() && cur != "/" && H5Lexists(loc, cur.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next;
  }
}

std::vector<hsize_t> dims(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) fail(Exit::bad_input, file + ": dataset " + name + " is missing");
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds) fail(Exit::bad_input, file + ": cannot open dataset " + name);
  Handle sp(H5Dget_space(ds.id()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(sp.id());
  if (rank < 0 || rank > 8) fail(Exit::bad_input, file + ": dataset " + name + " has a malformed rank " + std::to_string(rank));
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(sp.id(), d.data(), nullptr);
  return d;
}

template <typename T>
static std::vector<T> read_any(hid_t loc, const std::string& name, hid_t type, const std::vector<hsize_t>& expect,
                               const std::string& file, hsize_t max_elems) {
  auto d = dims(loc, name, file);
  if (!expect.empty() && d != expect) {
    auto txt = [](const std::vector<hsize_t>& v) {
      std::string s = "(";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + ")";
    };
    fail(Exit::bad_input, file + ": dataset " + name + " has shape " + txt(d) + ", expected " + txt(expect));
  }
  hsize_t total = 1;
  for (auto v : d) {
    if (v != 0 && total > max_elems / v)
      fail(Exit::bad_input, file + ": dataset " + name + " declares more than " + std::to_string(max_elems) + " elements; refusing to allocate");
    total *= v;
  }
  std::vector<T> out(static_cast<size_t>(total));
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (total > 0 && H5Dread(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail(Exit::bad_input, file + ": reading dataset " + name + " failed (checksum mismatch or truncated file)");
  return out;
}

std::vector<float> read_floats(hid_t loc, const std::string& name, const std::vector<hsize_t>& expect,
                               const std::string& file, hsize_t max_elems) {
  return read_any<float>(loc, name, H5T_NATIVE_FLOAT, expect, file, max_elems);
}

std::vector<int64_t> read_int64s(hid_t loc, const std::string& name, const std::string& file, hsize_t max_elems) {
  return read_any<int64_t>(loc, name, H5T_NATIVE_INT64, {}, file, max_elems);
}

std::vector<double> read_float64s(hid_t loc, const std::string& name, const std::vector<hsize_t>& expect,
                                  const std::string& file) {
  return read_any<double>(loc, name, H5T_NATIVE_DOUBLE, expect, file, hsize_t(1) << 20);
}

void attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& file) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), std::max<size_t>(1, value.size()));
  Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), t.id(), sp.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a) fail(Exit::io, file + ": cannot create attribute " + name);
  std::string v = value.empty() ? std::string(1, '\0') : value;
  check(H5Awrite(a.id(), t.id(), v.data()), file, "write of attribute " + name);
}

void attr_int(hid_t obj, const std::string& name, int64_t value, const std::string& file) {
  Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), H5T_NATIVE_INT64, sp.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a) fail(Exit::io, file + ": cannot create attribute " + name);
  check(H5Awrite(a.id(), H5T_NATIVE_INT64, &value), file, "write of attribute " + name);
}

void attr_ints(hid_t obj, const std::string& name, const std::vector<int64_t>& values, const std::string& file) {
  const hsize_t n = values.size();
  Handle sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), H5T_NATIVE_INT64, sp.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a) fail(Exit::io, file + ": cannot create attribute " + name);
  check(H5Awrite(a.id(), H5T_NATIVE_INT64, values.data()), file, "write of attribute " + name);
}

void attr_double(hid_t obj, const std::string& name, double value, const std::string& file) {
  Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), H5T_NATIVE_DOUBLE, sp.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a) fail(Exit::io, file + ": cannot create attribute " + name);
  check(H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &value), file, "write of attribute " + name);
}

static Handle open_attr(hid_t obj, const std::string& name, const std::string& file) {
  if (H5Aexists(obj, name.c_str()) <= 0) fail(Exit::bad_input, file + ": attribute " + name + " is missing");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) fail(Exit::bad_input, file + ": cannot open attribute " + name);
  return a;
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle t(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(t.id()) != H5T_STRING || H5Tis_variable_str(t.id()) > 0)
    fail(Exit::bad_input, file + ": attribute " + name + " is not a fixed-length string");
  size_t n = H5Tget_size(t.id());
  if (n > (size_t(1) << 24)) fail(Exit::bad_input, file + ": attribute " + name + " is implausibly large");
  std::string s(n, '\0');
  if (H5Aread(a.id(), t.id(), s.data()) < 0) fail(Exit::bad_input, file + ": reading attribute " + name + " failed");
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle sp(H5Aget_space(a.id()), H5Sclose);
  const hssize_t n = sp ? H5Sget_simple_extent_npoints(sp.id()) : -1;
  if (n < 0 || n > (1 << 20)) fail(Exit::bad_input, file + ": attribute " + name + " has a bad size");
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (n > 0 && H5Aread(a.id(), H5T_NATIVE_INT64, v.data()) < 0) fail(Exit::bad_input, file + ": reading attribute " + name + " failed");
  return v;
}

int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  int64_t v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) < 0) fail(Exit::bad_input, file + ": reading attribute " + name + " failed");
  return v;
}

double read_attr_double(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  double v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) < 0) fail(Exit::bad_input, file + ": reading attribute " + name + " failed");
  return v;
}

}  // namespace pt::h5
