// Small RAII helpers over the HDF5 C API: every call's return code is checked and a
// failure is an Exit::io error naming the file and object.
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

namespace pt::h5 {

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) { reset(); id_ = o.id_; close_ = o.close_; o.id_ = -1; }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  // Close now and report whether HDF5 said it succeeded.
  bool close() {
    if (id_ < 0) return true;
    herr_t r = close_ ? close_(id_) : 0;
    id_ = -1;
    return r >= 0;
  }
  void reset() { if (id_ >= 0 && close_) close_(id_); id_ = -1; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

void quiet();  // turn off HDF5's automatic error stack printing (we report our own)

// Files. create(): newest format (checksummed metadata), truncating.
Handle create_file(const std::string& path);
Handle open_file(const std::string& path);  // read-only; throws naming the path
// Groups (intermediate groups created).
Handle create_group(hid_t loc, const std::string& name, const std::string& file);
// A float32 dataset; chunked with Fletcher32 when `checksum`.
void write_floats(hid_t loc, const std::string& name, const float* data, const std::vector<hsize_t>& dims,
                  bool checksum, const std::string& file);
void write_int64s(hid_t loc, const std::string& name, const int64_t* data, const std::vector<hsize_t>& dims,
                  bool checksum, const std::string& file);
void write_floats64(hid_t loc, const std::string& name, const double* data, const std::vector<hsize_t>& dims,
                    bool checksum, const std::string& file);
// Read a float32/int64 dataset, checking its shape against `expect` (empty: any) and
// the element count against `max_elems` before allocating.
std::vector<float> read_floats(hid_t loc, const std::string& name, const std::vector<hsize_t>& expect,
                               const std::string& file, hsize_t max_elems = hsize_t(1) << 33);
std::vector<int64_t> read_int64s(hid_t loc, const std::string& name, const std::string& file,
                                 hsize_t max_elems = hsize_t(1) << 30);
std::vector<double> read_float64s(hid_t loc, const std::string& name, const std::vector<hsize_t>& expect,
                                  const std::string& file);
std::vector<hsize_t> dims(hid_t loc, const std::string& name, const std::string& file);
bool exists(hid_t loc, const std::string& name);

void attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& file);
void attr_int(hid_t obj, const std::string& name, int64_t value, const std::string& file);
void attr_ints(hid_t obj, const std::string& name, const std::vector<int64_t>& values, const std::string& file);
void attr_double(hid_t obj, const std::string& name, double value, const std::string& file);
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file);
int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file);
std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name, const std::string& file);
double read_attr_double(hid_t obj, const std::string& name, const std::string& file);

}  // namespace pt::h5
