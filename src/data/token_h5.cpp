// Token files in HDF5: a 1-D integer dataset /tokens (any integer type), read in blocks as
// int64 so that negative or too large ids are caught rather than converted, and stored as
// uint32. The shape and size are checked before allocating; errors name the file.
#include <hdf5.h>

#include <algorithm>

#include "../util/h5.hpp"
#include "pipetrain/error.hpp"
#include "sequence.hpp"

namespace pt {
namespace {

constexpr hsize_t kBlock = hsize_t(1) << 20;  // tokens per read

h5::Handle open_tokens(hid_t file, const std::string& path) {
  const auto dims = h5::dims(file, "/tokens", path);  // names the file when /tokens is missing
  if (dims.size() != 1 || dims[0] == 0)
    fail(Exit::bad_input, path + ": dataset /tokens has " + std::to_string(dims.size()) + " dimension(s)" +
                              (dims.size() == 1 ? " and no elements" : "") + "; expected a non-empty 1-D array of token ids", true);
  h5::Handle ds(H5Dopen2(file, "/tokens", H5P_DEFAULT), H5Dclose);
  h5::Handle type(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_INTEGER)
    fail(Exit::bad_input, path + ": dataset /tokens must hold integers (token ids)", true);
  return ds;
}

void read_block(hid_t ds, hsize_t start, hsize_t count, int64_t* out, const std::string& path) {
  h5::Handle file_space(H5Dget_space(ds), H5Sclose);
  h5::Handle mem_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, &start, nullptr, &count, nullptr) < 0 ||
      H5Dread(ds, H5T_NATIVE_INT64, mem_space.id(), file_space.id(), H5P_DEFAULT, out) < 0)
    fail(Exit::bad_input, path + ": cannot read dataset /tokens at " + std::to_string(start) + " (corrupt or truncated file?)");
}

}  // namespace

int64_t h5_token_count(const std::string& path) {
  h5::Handle f = h5::open_file(path);
  h5::Handle ds = open_tokens(f.id(), path);
  const int64_t n = static_cast<int64_t>(h5::dims(f.id(), "/tokens", path)[0]);
  if (n > kMaxDataBytes / 4)
    fail(Exit::bad_input, path + ": dataset /tokens holds " + std::to_string(n) + " tokens, more than " +
                              std::to_string(kMaxDataBytes / 4) + "; refusing to allocate", true);
  return n;
}

std::vector<uint32_t> read_token_h5(const std::string& path, int64_t vocab) {
  const int64_t n = h5_token_count(path);
  h5::Handle f = h5::open_file(path);
  h5::Handle ds = open_tokens(f.id(), path);
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  std::vector<int64_t> block(static_cast<size_t>(std::min<hsize_t>(kBlock, static_cast<hsize_t>(n))));
  for (hsize_t at = 0; at < static_cast<hsize_t>(n); at += kBlock) {
    const hsize_t count = std::min<hsize_t>(kBlock, static_cast<hsize_t>(n) - at);
    read_block(ds.id(), at, count, block.data(), path);
    check_token_ids(path, block.data(), static_cast<int64_t>(count), vocab, static_cast<int64_t>(at));
    std::copy(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(count), tokens.begin() + static_cast<std::ptrdiff_t>(at));
  }
  return tokens;
}

}  // namespace pt
