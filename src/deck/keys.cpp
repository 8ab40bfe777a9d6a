// The untyped half of keys.hpp: ranges, type names, and the text of values (the effective
// deck's TOML and the documentation's defaults) and of ranges.
#include "pipetrain/keys.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "key_text.hpp"

namespace pt {

KeyRange key_ge(double v) {
  KeyRange r;
  r.has_lo = true;
  r.lo = v;
  return r;
}
KeyRange key_gt(double v) {
  KeyRange r = key_ge(v);
  r.lo_open = true;
  return r;
}
KeyRange key_between(double lo, double hi, bool hi_open) {
  KeyRange r = key_ge(lo);
  r.has_hi = true;
  r.hi = hi;
  r.hi_open = hi_open;
  return r;
}

const char* key_type_name(KeyType t) {
  switch (t) {
    case KeyType::integer: return "integer";
    case KeyType::floating: return "float";
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::choice: return "string";
    case KeyType::int_list: return "array of integers";
    case KeyType::int_list_or_auto: return "array of integers or \"auto\"";
    case KeyType::choice_per_stage: return "string or array of strings (one per stage)";
  }
  return "?";
}

namespace deck_text {

namespace {
// The fewest significant digits (1..17) whose %g text reads back as v.
int shortest_digits(double v) {
  char buf[40];
  for (int prec = 1; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) return prec;
  }
  return 17;
}
}  // namespace

std::string toml_float(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", shortest_digits(v), v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string doc_float(double v) {
  if (!std::isfinite(v)) return toml_float(v);
  const int digits = shortest_digits(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
  const int exp10 = std::atoi(std::strchr(buf, 'e') + 1);
  if (exp10 < -4 || exp10 >= 16) return toml_float(v);  // scientific, as Python's repr
  std::snprintf(buf, sizeof buf, "%.*f", std::max(0, digits - 1 - exp10), v);
  std::string s = buf;
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string toml_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {  // TOML forbids raw control characters
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string toml_int_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string fmt_num(double v) {
  std::ostringstream o;
  o << std::setprecision(12) << v;
  return o.str();
}

bool in_range(const KeyRange& r, double v) {
  if (r.has_lo && (r.lo_open ? !(v > r.lo) : !(v >= r.lo))) return false;
  if (r.has_hi && (r.hi_open ? !(v < r.hi) : !(v <= r.hi))) return false;
  return true;
}

std::string range_message(const KeyRange& r) {
  if (r.has_lo && r.has_hi) return "must be in " + key_range_text(r);
  return "must be " + key_range_text(r);
}

}  // namespace deck_text

std::string key_range_text(const KeyRange& r) {
  using deck_text::fmt_num;
  if (r.has_lo && r.has_hi)
    return std::string(r.lo_open ? "(" : "[") + fmt_num(r.lo) + ", " + fmt_num(r.hi) + (r.hi_open ? ")" : "]");
  if (r.has_lo) return std::string(r.lo_open ? "> " : ">= ") + fmt_num(r.lo);
  if (r.has_hi) return std::string(r.hi_open ? "< " : "<= ") + fmt_num(r.hi);
  return "";
}

namespace {
template <class Float>
std::string value_text(const KeyValue& v, Float float_text) {
  using namespace deck_text;
  if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto f = std::get_if<double>(&v)) return float_text(*f);
  if (auto b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto s = std::get_if<std::string>(&v)) return toml_string(*s);
  if (auto l = std::get_if<std::vector<std::string>>(&v)) {
    std::string o = "[";
    for (size_t i = 0; i < l->size(); ++i) o += (i ? ", " : "") + toml_string((*l)[i]);
    return o + "]";
  }
  return toml_int_list(std::get<std::vector<int64_t>>(v));
}
}  // namespace

std::string key_value_text(const KeyValue& v) { return value_text(v, deck_text::toml_float); }
std::string key_value_doc(const KeyValue& v) { return value_text(v, deck_text::doc_float); }

}  // namespace pt
