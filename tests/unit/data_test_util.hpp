// Helpers shared by the data-file tests (test_data.cpp, test_text_data.cpp): a temporary
// folder per test, file writers, deterministic noise, and error-message expectations.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/error.hpp"

namespace pt::test {

using Bytes = std::vector<uint8_t>;

// A fresh temporary folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/pt_data_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() { (void)!std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_plain(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Deterministic, incompressible bytes.
inline Bytes noise(size_t n, uint32_t seed = 1) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<uint8_t>(x >> 7);
  }
  return b;
}

// Runs f, which must throw pt::Error with `code`; returns the message.
inline std::string error_of(const std::function<void()>& f, Exit code = Exit::bad_input) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no pt::Error thrown";
  return "";
}

}  // namespace pt::test

#define EXPECT_HAS(msg, frag) EXPECT_NE((msg).find(frag), std::string::npos) << "missing '" << (frag) << "' in: " << (msg)
