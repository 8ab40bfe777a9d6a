// `pipetrain compare A B`: per-tensor difference of two runs' weights.h5 (run directories
// or files), relative to the norm of B. Exit 0 within --rtol, 10 when they differ.
#include <cmath>
#include <cstdio>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

int cmd_compare(const CompareArgs& a) {
  auto weights_path = [](const std::string& p) { return file_exists(p + "/weights.h5") ? p + "/weights.h5" : p; };
  auto deck_path = [](const std::string& p) {
    if (file_exists(p + "/deck.toml")) return p + "/deck.toml";
    const std::string dir = p.substr(0, p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/'));
    return (dir.empty() ? std::string(".") : dir) + "/deck.toml";
  };
  const std::string wa = weights_path(a.a), wb = weights_path(a.b);
  const Deck deck = load_deck(deck_path(a.a), {});
  DataInfo info = data_info(deck);
  Model model(deck, info.shape, info.classes);
  auto A = read_weights_h5(wa, model), SA = read_state_h5(wa, model);
  auto B = read_weights_h5(wb, model), SB = read_state_h5(wb, model);
  double worst = 0;
  bool identical = true;
  if (!a.quiet) std::printf("%-5s %-24s %-8s %14s %14s\n", "layer", "name", "tensor", "rel diff", "max abs diff");
  // one tensor: its relative (to B's norm) and largest absolute difference
  auto diff = [&](int i, const std::string& name, const std::vector<float>& x, const std::vector<float>& y, size_t off, size_t n) {
    double d2 = 0, b2 = 0, mx = 0;
    for (size_t k = off; k < off + n; ++k) {
      if (x[k] != y[k]) identical = false;
      d2 += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
      b2 += double(y[k]) * y[k];
      mx = std::max(mx, std::fabs(double(x[k]) - y[k]));
    }
    const double rel = std::sqrt(d2) / std::max(1e-30, std::sqrt(b2));
    worst = std::max(worst, rel);
    if (!a.quiet) std::printf("%-5d %-24s %-8s %14.3e %14.3e\n", i, model.layer(i).name().c_str(), name.c_str(), rel, mx);
  };
  for (int i = 0; i < model.size(); ++i) {
    const size_t li = static_cast<size_t>(i);
    for (const ParamTensor& p : model.layer(i).params())
      diff(i, p.name, A[li], B[li], static_cast<size_t>(p.offset), static_cast<size_t>(p.size));
    if (!SA[li].empty() && SA[li].size() == SB[li].size()) diff(i, "state", SA[li], SB[li], 0, SA[li].size());
  }
  const bool ok = a.rtol == 0 ? identical : worst <= a.rtol;
  std::printf("%s vs %s: %s, worst relative difference %.3e (tolerance %.1e)%s\n", wa.c_str(), wb.c_str(),
              identical ? "bitwise identical" : "differ", worst, a.rtol, ok ? "" : "  EXCEEDED");
  return ok ? 0 : 10;
}

}  // namespace pt
