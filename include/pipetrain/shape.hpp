// Per-sample tensor shapes: a feature vector [F], an image [C, H, W], a sequence of
// feature vectors [T, D], or T integer token ids ("[T] tokens", carried as exact float32
// values). Batches are contiguous arrays of n samples of one shape (NCHW for images, as
// PyTorch; [n, T, D] for sequences).
#pragma once
#include <cstdint>
#include <string>

namespace pt {

struct Shape {
  int rank = 0;            // 1: [F] or [T] tokens, 2: [T, D], 3: [C, H, W]
  int64_t d[3] = {1, 1, 1};
  bool is_tokens = false;  // rank 1 holding token ids (inputs of an embedding), not features

  static Shape vec(int64_t f) { Shape s; s.rank = 1; s.d[0] = f; return s; }
  static Shape chw(int64_t c, int64_t h, int64_t w) { Shape s; s.rank = 3; s.d[0] = c; s.d[1] = h; s.d[2] = w; return s; }
  static Shape seq(int64_t T, int64_t D) { Shape s; s.rank = 2; s.d[0] = T; s.d[1] = D; return s; }
  static Shape tokens(int64_t T) { Shape s = vec(T); s.is_tokens = true; return s; }
  int64_t numel() const { return rank == 0 ? 0 : d[0] * d[1] * d[2]; }
  int64_t c() const { return d[0]; }
  int64_t h() const { return d[1]; }
  int64_t w() const { return d[2]; }
  int64_t T() const { return d[0]; }  // sequence length ([T, D] and tokens)
  int64_t D() const { return d[1]; }  // features per position ([T, D])
  bool operator==(const Shape& o) const {
    return rank == o.rank && is_tokens == o.is_tokens && d[0] == o.d[0] && d[1] == o.d[1] && d[2] == o.d[2];
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const {
    if (rank == 1) return "[" + std::to_string(d[0]) + "]" + (is_tokens ? " tokens" : "");
    if (rank == 2) return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + "]";
    if (rank == 3) return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
    return "[]";
  }
};

}  // namespace pt
