// Corpus files on disk: a text corpus (one file, or a folder's regular files in name order,
// skipping hidden names, "*.dat" fortune index files and symlinks) read as bytes, and raw
// token files of little-endian uint16 (nanoGPT's train.bin / val.bin). Sizes are checked
// before anything is allocated; every error names the path and the values involved.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "pipetrain/error.hpp"
#include "sequence.hpp"

namespace pt {
namespace {

struct stat stat_or_fail(const std::string& path, const std::string& what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    // A path that does not exist is an input error (as a missing deck); other failures are I/O.
    const int e = errno;
    const bool missing = e == ENOENT || e == ENOTDIR;
    fail(missing ? Exit::bad_input : Exit::io, path + ": cannot open " + what + ": " + std::strerror(e), missing);
  }
  return st;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The regular files of a folder that make up a text corpus, sorted by name.
std::vector<std::string> folder_text_files(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) fail(Exit::io, dir + ": cannot list the text corpus folder: " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = readdir(d.get())) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || ends_with(name, ".dat")) continue;
    struct stat st;
    const std::string full = dir + "/" + name;
    if (lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(full);  // no symlinks, folders
  }
  std::sort(names.begin(), names.end());
  if (names.empty())
    fail(Exit::bad_input, dir + ": no text files in this folder (hidden files, *.dat index files, symlinks and "
                                "subfolders are skipped)", true);
  return names;
}

}  // namespace

int64_t regular_file_bytes(const std::string& path, const std::string& what) {
  const struct stat st = stat_or_fail(path, what);
  if (!S_ISREG(st.st_mode)) fail(Exit::bad_input, path + ": " + what + " is not a regular file", true);
  return static_cast<int64_t>(st.st_size);
}

void read_file_exact(const std::string& path, uint8_t* dst, int64_t n) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) fail(Exit::io, path + ": cannot read: " + std::strerror(errno));
  const size_t got = n > 0 ? std::fread(dst, 1, static_cast<size_t>(n), f.get()) : 0;
  if (static_cast<int64_t>(got) != n)
    fail(Exit::io, path + ": read " + std::to_string(got) + " of " + std::to_string(n) + " bytes (" +
                       (std::ferror(f.get()) ? std::strerror(errno) : "the file shrank while reading") + ")");
}

void token_out_of_range(const std::string& path, int64_t position, int64_t value, int64_t vocab) {
  fail(Exit::bad_input, path + ": token " + std::to_string(position) + " is " + std::to_string(value) +
                            ", outside the vocabulary 0.." + std::to_string(vocab - 1) + " (data.vocab = " +
                            std::to_string(vocab) + ")", true);
}

std::vector<std::string> text_corpus_files(const std::string& path) {
  const struct stat st = stat_or_fail(path, "text corpus");
  if (S_ISREG(st.st_mode)) return {path};
  if (!S_ISDIR(st.st_mode)) fail(Exit::bad_input, path + ": text corpus is neither a file nor a folder", true);
  return folder_text_files(path);
}

CorpusFiles stat_text_corpus(const std::string& path) {
  CorpusFiles c;
  c.names = text_corpus_files(path);
  for (const auto& name : c.names) {
    c.bytes.push_back(regular_file_bytes(name, "text file"));
    c.total += c.bytes.back();
  }
  if (c.total == 0)
    fail(Exit::bad_input, path + ": the text corpus is empty (" + std::to_string(c.names.size()) + " file" +
                              (c.names.size() == 1 ? "" : "s") + ", 0 bytes)", true);
  if (c.total > kMaxDataBytes)
    fail(Exit::bad_input, path + ": the text corpus holds " + std::to_string(c.total) + " bytes, more than " +
                              std::to_string(kMaxDataBytes) + "; refusing to allocate", true);
  return c;
}

std::vector<uint8_t> read_text_corpus(const std::string& path) {
  const CorpusFiles c = stat_text_corpus(path);
  std::vector<uint8_t> bytes(static_cast<size_t>(c.total));
  int64_t at = 0;
  for (size_t i = 0; i < c.names.size(); ++i) {
    read_file_exact(c.names[i], bytes.data() + at, c.bytes[i]);
    at += c.bytes[i];
  }
  return bytes;
}

bool is_hdf5_name(const std::string& path) { return ends_with(path, ".h5") || ends_with(path, ".hdf5"); }

int64_t bin_token_count(const std::string& path) {
  const int64_t bytes = regular_file_bytes(path, "token file");
  if (bytes % 2 != 0)
    fail(Exit::bad_input, path + ": " + std::to_string(bytes) + " bytes is an odd size; a .bin token file holds "
                              "little-endian uint16 tokens, 2 bytes each", true);
  if (bytes == 0) fail(Exit::bad_input, path + ": the token file is empty", true);
  if (bytes > kMaxDataBytes)
    fail(Exit::bad_input, path + ": " + std::to_string(bytes) + " bytes of tokens, more than " +
                              std::to_string(kMaxDataBytes) + "; refusing to allocate", true);
  return bytes / 2;
}

std::vector<uint16_t> read_token_bin(const std::string& path, int64_t vocab) {
  const int64_t n = bin_token_count(path);
  std::vector<uint16_t> t(static_cast<size_t>(n));
  read_file_exact(path, reinterpret_cast<uint8_t*>(t.data()), 2 * n);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
    for (auto& v : t) v = static_cast<uint16_t>(v << 8 | v >> 8);
  check_token_ids(path, t.data(), n, vocab);
  return t;
}

}  // namespace pt
