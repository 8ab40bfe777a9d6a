// IDX reader (the MNIST format), gzip'd or plain: validates the magic, the rank, the
// declared sizes against the file before allocating, and reports truncation with sizes.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() { if (f) gzclose(f); }
};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

// Largest ratio of uncompressed to compressed size deflate can reach (about 1032:1), with
// slack for the gzip header: a gzip file of S bytes cannot hold more than this.
int64_t gzip_max_output(int64_t compressed) { return 1032 * compressed + 4096; }

// Open the file (a missing path is bad input, other failures I/O) and check its magic and rank.
int64_t open_idx(const std::string& path, int expected_rank, GzFile& gz) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    // A path that does not exist is an input error (like a missing deck); other failures are I/O.
    const int e = errno;
    fail(e == ENOENT || e == ENOTDIR ? Exit::bad_input : Exit::io,
         path + ": cannot open data file: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) fail(Exit::bad_input, path + ": data file is not a regular file");
  gz.f = gzopen(path.c_str(), "rb");
  if (!gz.f) fail(Exit::io, path + ": cannot open data file: " + std::strerror(errno));
  const int64_t header = 4 + 4 * int64_t(expected_rank);
  unsigned char magic[4];
  int got = gzread(gz.f, magic, 4);
  if (got != 4)
    fail(Exit::bad_input, path + ": truncated IDX file: expected a " + std::to_string(header) + "-byte header, got " +
                              std::to_string(std::max(got, 0)) + " bytes");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    fail(Exit::bad_input, path + ": not an IDX file of unsigned bytes: wrong magic " + buf + " (expected 00 00 08 0" +
                              std::to_string(expected_rank) + ")");
  }
  if (magic[3] != expected_rank)
    fail(Exit::bad_input, path + ": IDX rank " + std::to_string(magic[3]) + ", expected " + std::to_string(expected_rank) +
                              (expected_rank == 3 ? " (images N x H x W)" : " (labels N)"));
  return static_cast<int64_t>(st.st_size);
}

// The dimensions after the magic into a.dims; returns their product (bytes of data), which
// must stay under kMaxDataBytes.
int64_t read_dims(const std::string& path, int expected_rank, GzFile& gz, IdxArray& a) {
  const int64_t header = 4 + 4 * int64_t(expected_rank);
  int64_t count = 1;
  for (int i = 0; i < expected_rank; ++i) {
    unsigned char d[4];
    const int r = gzread(gz.f, d, 4);
    if (r != 4)
      fail(Exit::bad_input, path + ": truncated IDX header: expected " + std::to_string(header) + " bytes, got " +
                                std::to_string(4 + 4 * i + std::max(r, 0)) + " (dimension " + std::to_string(i) + " missing)");
    int64_t v = int64_t(d[0]) << 24 | int64_t(d[1]) << 16 | int64_t(d[2]) << 8 | int64_t(d[3]);
    if (v <= 0)
      fail(Exit::bad_input, path + ": IDX dimension " + std::to_string(i) + " = " + std::to_string(v) + " is out of range (must be > 0)");
    a.dims.push_back(v);
    // Divide rather than multiply: the product of absurd dimensions must not overflow.
    if (v > kMaxDataBytes / count) {
      for (int j = i + 1; j < expected_rank; ++j) {  // name every dimension in the message when present
        unsigned char e[4];
        if (gzread(gz.f, e, 4) != 4) break;
        a.dims.push_back(int64_t(e[0]) << 24 | int64_t(e[1]) << 16 | int64_t(e[2]) << 8 | int64_t(e[3]));
      }
      fail(Exit::bad_input, path + ": IDX header declares dims " + dims_text(a.dims) + ", more than " +
                                std::to_string(kMaxDataBytes) + " bytes of data; refusing to allocate");
    }
    count *= v;
  }
  return count;
}

// `count` bytes of data into a.bytes, in geometrically growing pieces, so memory follows the
// data actually present (a gzip file's true size is only known once it is decompressed);
// then nothing may follow them. The capacity is reserved up front (address space only: a
// page is resident once a piece is written), so growing never copies: the data's resident
// bytes never exceed what has been read so far, twice over at most (the memory model counts
// the data as held).
void read_payload(const std::string& path, GzFile& gz, int64_t count, IdxArray& a) {
  a.bytes.reserve(static_cast<size_t>(count));
  int64_t done = 0;
  while (done < count) {
    const int64_t target = std::min<int64_t>(count, std::max<int64_t>(int64_t(1) << 24, 2 * done));
    a.bytes.resize(static_cast<size_t>(target));
    while (done < target) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(target - done, 1 << 30));
      const int r = gzread(gz.f, a.bytes.data() + done, chunk);
      if (r <= 0) {
        int errnum = 0;
        const char* msg = gzerror(gz.f, &errnum);
        fail(Exit::bad_input, path + ": truncated or corrupt IDX data: the header (dims " + dims_text(a.dims) + ") declares " +
                                  std::to_string(count) + " bytes after the header, but the file holds " +
                                  std::to_string(done) + (errnum ? std::string(" (zlib: ") + msg + ")" : std::string()));
      }
      done += r;
    }
  }
  // Data past the declared size means the header and the file disagree.
  unsigned char extra[4096];
  int64_t more = 0;
  for (int r; (r = gzread(gz.f, extra, sizeof extra)) > 0;) more += r;
  if (more > 0)
    fail(Exit::bad_input, path + ": IDX header declares " + std::to_string(count) + " bytes of data (dims " + dims_text(a.dims) +
                              "), but the file holds " + std::to_string(count + more) + " bytes after the header");
}

}  // namespace

std::vector<int64_t> read_idx_dims(const std::string& path, int expected_rank) {
  GzFile gz;
  open_idx(path, expected_rank, gz);
  IdxArray a;
  read_dims(path, expected_rank, gz, a);
  return a.dims;
}

IdxArray read_idx(const std::string& path, int expected_rank) {
  GzFile gz;
  const int64_t file_size = open_idx(path, expected_rank, gz);
  const int64_t header = 4 + 4 * int64_t(expected_rank);
  IdxArray a;
  const int64_t count = read_dims(path, expected_rank, gz, a);
  const bool plain = gzdirect(gz.f) == 1;
  // Cross-check the declared size against the file before allocating.
  if (plain && file_size - header != count)
    fail(Exit::bad_input, path + ": IDX header declares " + std::to_string(count) + " bytes of data (dims " + dims_text(a.dims) +
                              "), but the file holds " + std::to_string(file_size - header) + " bytes after the " +
                              std::to_string(header) + "-byte header");
  if (!plain && count > gzip_max_output(file_size))
    fail(Exit::bad_input, path + ": IDX header declares " + std::to_string(count) + " bytes of data (dims " + dims_text(a.dims) +
                              "), but a gzip file of " + std::to_string(file_size) + " bytes holds at most " +
                              std::to_string(gzip_max_output(file_size)) + "; refusing to allocate");
  read_payload(path, gz, count, a);
  return a;
}

}  // namespace pt
