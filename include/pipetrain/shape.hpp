// Per-sample tensor shapes: a feature vector [F] or an image [C, H, W]. Batches are
// contiguous arrays of n samples of one shape (NCHW for images, as PyTorch).
#pragma once
#include <cstdint>
#include <string>

namespace pt {

struct Shape {
  int rank = 0;            // 1: [F], 3: [C, H, W]
  int64_t d[3] = {1, 1, 1};

  static Shape vec(int64_t f) { Shape s; s.rank = 1; s.d[0] = f; return s; }
  static Shape chw(int64_t c, int64_t h, int64_t w) { Shape s; s.rank = 3; s.d[0] = c; s.d[1] = h; s.d[2] = w; return s; }
  int64_t numel() const { return rank == 0 ? 0 : d[0] * d[1] * d[2]; }
  int64_t c() const { return d[0]; }
  int64_t h() const { return d[1]; }
  int64_t w() const { return d[2]; }
  bool operator==(const Shape& o) const {
    return rank == o.rank && d[0] == o.d[0] && d[1] == o.d[1] && d[2] == o.d[2];
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const {
    if (rank == 1) return "[" + std::to_string(d[0]) + "]";
    if (rank == 3) return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
    return "[]";
  }
};

}  // namespace pt
