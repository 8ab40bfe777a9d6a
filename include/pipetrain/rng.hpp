// Counter-based random numbers: every draw is a pure function of (seed, stream, index),
// so initialisation, shuffling and dropout do not depend on rank, layout or call order.
#pragma once
#include <cmath>
#include <cstdint>

namespace pt {

// Stream identifiers: which purpose a key serves (mixed into every key).
enum class Stream : uint64_t { init = 1, shuffle = 2, dropout = 3, synthetic = 4 };

inline constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A key names one random stream: key(seed, Stream::dropout, layer, sample).
inline constexpr uint64_t rng_key(uint64_t seed, Stream s, uint64_t a = 0, uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(s))) ^ a) ^
                    (b * 0xD1B54A32D192ED03ull));
}

// The i-th 64-bit draw of a stream.
inline constexpr uint64_t rng_bits(uint64_t key, uint64_t i) {
  return splitmix64(key ^ splitmix64(i + 0x632BE59BD9B4E019ull));
}

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
inline float rng_uniform(uint64_t key, uint64_t i) {
  return static_cast<float>(rng_bits(key, i) >> 40) * (1.0f / 16777216.0f);
}

// Uniform integer in [0, n) without modulo bias worth noticing for n < 2^32.
inline uint64_t rng_below(uint64_t key, uint64_t i, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng_bits(key, i)) * n) >> 64);
}

}  // namespace pt
