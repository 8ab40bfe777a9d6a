// Internal to src/deck: the text forms of deck values and ranges that the parser's messages,
// the effective deck and docs/DECK.md share (keys.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/keys.hpp"

namespace pt::deck_text {

std::string toml_float(double v);   // shortest text that reads back the same double: 0.1, 3e+02, 1e-08
std::string doc_float(double v);    // as Python prints it: 300.0, 0.05, 1e-08
std::string toml_string(const std::string& s);  // quoted and escaped
std::string toml_int_list(const std::vector<int64_t>& v);  // [1, 2]
std::string fmt_num(double v);      // a range bound or a count in a message: 12 significant digits
bool in_range(const KeyRange& r, double v);
std::string range_message(const KeyRange& r);  // "must be > 0", "must be in [0, 1)"

}  // namespace pt::deck_text
