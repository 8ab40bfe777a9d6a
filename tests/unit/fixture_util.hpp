// Helpers for the tests against PyTorch fixtures (tests/fixtures/*.h5, written by
// tools/make_fixtures.py) and the finite-difference checks: reading fixtures, backend
// buffers, elementwise comparison with a per-tensor tolerance, a deterministic generator.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../src/util/h5.hpp"
#include "pipetrain/backend.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/optim.hpp"
#include "test_support.hpp"

namespace pt::test {

// ---- fixtures ----------------------------------------------------------------------

class Fixture {
 public:
  explicit Fixture(const std::string& name) : path_(fixtures_dir() + "/" + name + ".h5"), f_(h5::open_file(path_)) {}
  const std::string& path() const { return path_; }
  hid_t id() const { return f_.id(); }
  bool has(const std::string& ds) const { return h5::exists(f_.id(), ds); }
  bool has_attr(const std::string& a) const { return H5Aexists(f_.id(), a.c_str()) > 0; }
  std::vector<float> floats(const std::string& ds) const { return h5::read_floats(f_.id(), ds, {}, path_); }
  std::vector<int64_t> ints(const std::string& ds) const { return h5::read_int64s(f_.id(), ds, path_); }
  std::vector<double> doubles(const std::string& ds) const { return read_doubles(f_.id(), ds); }
  int64_t i(const std::string& a) const { return h5::read_attr_int(f_.id(), a, path_); }
  double d(const std::string& a) const { return h5::read_attr_double(f_.id(), a, path_); }
  std::string s(const std::string& a) const { return h5::read_attr_string(f_.id(), a, path_); }

  // float64 datasets at full precision (pt::h5 only reads float32 and int64).
  std::vector<double> read_doubles(hid_t loc, const std::string& ds) const {
    auto dims = h5::dims(loc, ds, path_);
    size_t total = 1;
    for (auto v : dims) total *= static_cast<size_t>(v);
    std::vector<double> out(total);
    h5::Handle h(H5Dopen2(loc, ds.c_str(), H5P_DEFAULT), H5Dclose);
    if (!h || (total && H5Dread(h.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0))
      throw std::runtime_error(path_ + ": cannot read " + ds);
    return out;
  }

 private:
  std::string path_;
  h5::Handle f_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- backends ----------------------------------------------------------------------

// The backends the numerical tests run on: the host backend always; the CUDA backend too
// in a CUDA=1 build on a machine where it can be created (tolerances are the same: it uses
// FP32 math unless PT_CUDA_TF32=1). Tags are "" for the host and "[cuda] " for CUDA.
struct TestBackend {
  std::string tag;
  std::unique_ptr<Backend> be;
};

inline std::vector<TestBackend> test_backends() {
  std::vector<TestBackend> v;
  v.push_back({"", make_host_backend()});
  if (cuda_backend_compiled()) {
    try {
      v.push_back({"[cuda] ", make_cuda_backend(0)});
    } catch (const std::exception& e) {
      static bool said = false;
      if (!said) std::printf("[note] CUDA backend compiled but not usable here (%s): host only\n", e.what());
      said = true;
    }
  }
  return v;
}

// ---- backend buffers -----------------------------------------------------------------

inline std::vector<float> to_host(Backend& be, const float* p, size_t n) {
  std::vector<float> h(n);
  if (n) be.to_host(h.data(), p, n);
  return h;
}

inline Buffer on_backend(Backend& be, const std::vector<float>& h) {
  Buffer b(be, h.size());
  if (!h.empty()) be.from_host(b.data(), h.data(), h.size());
  return b;
}

inline Buffer filled(Backend& be, size_t n, float v) {
  return on_backend(be, std::vector<float>(n, v));
}

// A label buffer in backend memory.
struct Labels {
  Backend& be;
  int32_t* p = nullptr;
  Labels(Backend& b, const std::vector<int64_t>& v) : be(b) {
    std::vector<int32_t> h(v.begin(), v.end());
    p = be.alloc_int(std::max<size_t>(1, h.size()));
    if (!h.empty()) be.labels_from_host(p, h.data(), h.size());
  }
  ~Labels() { be.release_int(p); }
  Labels(const Labels&) = delete;
  Labels& operator=(const Labels&) = delete;
};

// ---- comparison --------------------------------------------------------------------

struct Tol {
  double atol, rtol;
};

// Worst |got - want| / (atol + rtol |want|) over the elements; a non-finite `got`, or a
// size mismatch, counts as infinitely bad (std::max would silently skip a NaN).
struct Worst {
  double ratio = 0;
  size_t at = 0;
  double got = 0, want = 0;
};

template <typename G, typename W>
Worst worst_of(const G& got, const W& want, Tol t) {
  Worst w;
  if (got.size() != want.size()) {
    w.ratio = INFINITY;
    return w;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(want[i]);
    double q = std::fabs(g - r) / (t.atol + t.rtol * std::fabs(r));
    if (!std::isfinite(g) || !std::isfinite(q)) q = INFINITY;
    if (q > w.ratio || (i == 0 && q >= w.ratio)) w = {q, i, g, r};
  }
  return w;
}

// Print the worst ratio of each comparison when PT_PRINT_RATIOS is set (the numbers that
// go into reports); tests/fixtures/README.md explains the tolerances.
inline void note_ratio(const std::string& what, const Worst& w) {
  if (std::getenv("PT_PRINT_RATIOS"))
    std::printf("[ratio] %-52s %.3g (at %zu: got %.9g want %.9g)\n", what.c_str(), w.ratio, w.at, w.got, w.want);
}

template <typename G, typename W>
::testing::AssertionResult all_close(const std::string& what, const G& got, const W& want, Tol t) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != reference size " << want.size();
  const Worst w = worst_of(got, want, t);
  note_ratio(what, w);
  if (w.ratio <= 1.0) return ::testing::AssertionSuccess();
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = want[i];
    if (!(std::fabs(g - r) <= t.atol + t.rtol * std::fabs(r))) ++bad;
  }
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " elements outside atol " << t.atol << " + rtol " << t.rtol
                                       << " |ref|; worst ratio " << w.ratio << " at " << w.at << ": got " << w.got
                                       << ", reference " << w.want;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// ---- optimizer settings -------------------------------------------------------------

inline std::string fmt(double v) {
  std::ostringstream o;
  o << std::setprecision(17) << v;
  std::string s = o.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A valid deck whose [train] comes from --set overrides: the settings object is the one
// the trainer would build, defaults and validation included.
inline OptimConfig train_settings(const std::vector<std::string>& sets) {
  const std::string text =
      "[data]\nsource = \"synthetic\"\nshape = [4]\nclasses = 2\n[model]\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 2\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  return optim_config(parse_deck_text(text, "optim.toml", sets).train);
}

inline std::vector<std::string> sets_from(const Fixture& fx, const std::string& prefix = "") {
  const auto a = [&](const std::string& k) { return prefix + k; };
  std::vector<std::string> s = {
      "train.optimizer=\"" + fx.s(a("optimizer")) + "\"",
      "train.lr=" + fmt(fx.d(a("lr"))),
  };
  if (fx.has_attr(a("lr_schedule"))) {
    s.push_back("train.lr_schedule=\"" + fx.s(a("lr_schedule")) + "\"");
    s.push_back("train.warmup_steps=" + std::to_string(fx.i(a("warmup_steps"))));
    s.push_back("train.step_size=" + std::to_string(fx.i(a("step_size"))));
    s.push_back("train.gamma=" + fmt(fx.d(a("gamma"))));
    s.push_back("train.min_lr=" + fmt(fx.d(a("min_lr"))));
  }
  if (fx.s(a("optimizer")) == "sgd") {
    s.push_back("train.momentum=" + fmt(fx.d(a("momentum"))));
    s.push_back(std::string("train.nesterov=") + (fx.i(a("nesterov")) ? "true" : "false"));
  } else {
    s.push_back("train.beta1=" + fmt(fx.d(a("beta1"))));
    s.push_back("train.beta2=" + fmt(fx.d(a("beta2"))));
    s.push_back("train.eps=" + fmt(fx.d(a("eps"))));
  }
  s.push_back("train.weight_decay=" + fmt(fx.d(a("weight_decay"))));
  return s;
}

// ---- deterministic numbers ---------------------------------------------------------

inline uint64_t mix64(uint64_t x) {  // splitmix64 (public domain), written here independently of pipetrain
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The model fixtures' initial weights: bit-identical to fixture_uniform() in
// tools/make_fixtures.py. value[i] = float((2u - 1) * bound), u = (mix64(seed<<40 ^ tensor<<32 ^ i) >> 40) / 2^24.
inline std::vector<float> fixture_uniform(uint64_t seed, uint64_t tensor, size_t count, double bound) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t key = (seed << 40) ^ (tensor << 32) ^ static_cast<uint64_t>(i);
    const double u = static_cast<double>(mix64(key) >> 40) * (1.0 / 16777216.0);
    v[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
  return v;
}

// A small counter-based stream for test inputs.
class Rand {
 public:
  explicit Rand(uint64_t seed) : s_(seed * 0x100000001B3ull + 17) {}
  double uniform() { return static_cast<double>(mix64(s_++) >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * uniform()); }
  std::vector<float> vec(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(uniform() * static_cast<double>(n)); }

 private:
  uint64_t s_;
};

}  // namespace pt::test
