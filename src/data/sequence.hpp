// Text and token corpora (docs/DATA.md), internal to src/data: file helpers shared by the
// readers, and the deck -> data entry points that open_data and data_info dispatch to.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/data.hpp"

namespace pt {

// Size of a regular file that must exist. Missing: bad input; unreadable: I/O; `what`
// names the file's role in the message ("text file", "token file").
int64_t regular_file_bytes(const std::string& path, const std::string& what);
// Read exactly n bytes of `path` into dst (Exit::io naming the path otherwise).
void read_file_exact(const std::string& path, uint8_t* dst, int64_t n);
// The corpus files and their sizes, without reading them.
struct CorpusFiles {
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
  int64_t total = 0;
};
CorpusFiles stat_text_corpus(const std::string& path);
// Token counts without reading the tokens (the same checks as the readers' headers).
int64_t bin_token_count(const std::string& path);
int64_t h5_token_count(const std::string& path);

// Every id in 0..vocab-1; otherwise a bad-input error naming the file, position and value.
// `first` is the position of t[0] in the file.
[[noreturn]] void token_out_of_range(const std::string& path, int64_t position, int64_t value, int64_t vocab);
template <typename Tok>
void check_token_ids(const std::string& path, const Tok* t, int64_t n, int64_t vocab, int64_t first = 0) {
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<int64_t>(t[i]) < 0 || static_cast<int64_t>(t[i]) >= vocab)
      token_out_of_range(path, first + i, static_cast<int64_t>(t[i]), vocab);
}

DataSplit open_text_data(const Deck& d);
DataSplit open_token_data(const Deck& d);
DataInfo sequence_data_info(const Deck& d);  // text and tokens

}  // namespace pt
