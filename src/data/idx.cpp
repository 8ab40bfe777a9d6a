// IDX reader (the MNIST format), gzip'd or plain: validates the magic, the rank, the
// declared sizes against the file before allocating, and reports truncation with sizes.
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() { if (f) gzclose(f); }
};

// ISIZE of a gzip file: the uncompressed size mod 2^32, from its last four bytes; -1 if not gzip.
int64_t gzip_isize(const std::string& path, int64_t file_size) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return -1;
  unsigned char head[2] = {0, 0}, tail[4];
  int64_t out = -1;
  if (std::fread(head, 1, 2, f) == 2 && head[0] == 0x1f && head[1] == 0x8b && file_size >= 18 &&
      std::fseek(f, -4, SEEK_END) == 0 && std::fread(tail, 1, 4, f) == 4)
    out = int64_t(tail[0]) | int64_t(tail[1]) << 8 | int64_t(tail[2]) << 16 | int64_t(tail[3]) << 24;
  std::fclose(f);
  return out;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    fail(Exit::io, path + ": cannot open data file: " + std::strerror(errno));
  GzFile gz;
  gz.f = gzopen(path.c_str(), "rb");
  if (!gz.f) fail(Exit::io, path + ": cannot open data file: " + std::strerror(errno));
  unsigned char magic[4];
  int got = gzread(gz.f, magic, 4);
  if (got != 4)
    fail(Exit::bad_input, path + ": truncated IDX file: expected a 4-byte header, got " + std::to_string(std::max(got, 0)) + " bytes");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    fail(Exit::bad_input, path + ": not an IDX file of unsigned bytes: wrong magic " + buf + " (expected 00 00 08 0" +
                              std::to_string(expected_rank) + ")");
  }
  if (magic[3] != expected_rank)
    fail(Exit::bad_input, path + ": IDX rank " + std::to_string(magic[3]) + ", expected " + std::to_string(expected_rank) +
                              (expected_rank == 3 ? " (images N x H x W)" : " (labels N)"));
  IdxArray a;
  int64_t count = 1;
  for (int i = 0; i < expected_rank; ++i) {
    unsigned char d[4];
    if (gzread(gz.f, d, 4) != 4)
      fail(Exit::bad_input, path + ": truncated IDX header: dimension " + std::to_string(i) + " missing");
    int64_t v = int64_t(d[0]) << 24 | int64_t(d[1]) << 16 | int64_t(d[2]) << 8 | int64_t(d[3]);
    if (v <= 0 || v > (int64_t(1) << 31))
      fail(Exit::bad_input, path + ": IDX dimension " + std::to_string(i) + " = " + std::to_string(v) + " is out of range");
    a.dims.push_back(v);
    count *= v;
    if (count > kMaxDataBytes)
      fail(Exit::bad_input, path + ": IDX header declares more than " + std::to_string(kMaxDataBytes) + " bytes of data; refusing to allocate");
  }
  const int64_t header = 4 + 4 * expected_rank;
  // Cross-check the declared size against the file before allocating.
  int64_t isize = gzip_isize(path, st.st_size);
  int64_t actual = -1;
  if (isize < 0) actual = static_cast<int64_t>(st.st_size) - header;  // plain file
  else if (header + count < (int64_t(1) << 32) && isize != header + count)
    actual = isize - header;  // gzip trailer says otherwise
  if (actual >= 0 && actual != count)
    fail(Exit::bad_input, path + ": IDX header declares " + std::to_string(count) + " bytes of data (dims " +
                              [&] { std::string s; for (auto d : a.dims) s += (s.empty() ? "" : "x") + std::to_string(d); return s; }() +
                              "), but the file holds " + std::to_string(std::max<int64_t>(actual, 0)));
  a.bytes.resize(static_cast<size_t>(count));
  int64_t done = 0;
  while (done < count) {
    unsigned chunk = static_cast<unsigned>(std::min<int64_t>(count - done, 1 << 30));
    int r = gzread(gz.f, a.bytes.data() + done, chunk);
    if (r <= 0) {
      int errnum = 0;
      const char* msg = gzerror(gz.f, &errnum);
      fail(Exit::bad_input, path + ": truncated or corrupt IDX data: expected " + std::to_string(count) +
                                " bytes after the header, got " + std::to_string(done) +
                                (errnum ? std::string(" (zlib: ") + msg + ")" : std::string()));
    }
    done += r;
  }
  return a;
}

}  // namespace pt
