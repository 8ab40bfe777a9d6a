// The layer registry, the factory, and the pieces shared by all layers.
#include "pipetrain/error.hpp"
#include "layer_util.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/registry.hpp"

namespace pt {
namespace {
NamedRegistry<LayerType>& registry() { return NamedRegistry<LayerType>::instance(); }
}  // namespace

bool register_layer_type(LayerType t) {
  PT_CHECK(t.make, "layer type '" << t.name << "' registered without a factory");
  return registry().add(std::move(t), "layer type");
}
const LayerType* find_layer_type(const std::string& name) { return registry().find(name); }
std::vector<const LayerType*> layer_types() { return registry().all(); }
std::vector<std::string> known_layer_types() { return registry().names(); }

int64_t Layer::num_params() const {
  int64_t n = 0;
  for (auto& p : params()) n += p.size;
  return n;
}

void Layer::evaluate_loss(const LayerCtx&, const float*, const float*, float*, int64_t, double*, int64_t*, int64_t*) const {
  fail(Exit::internal, "layer '" + spec_.name + "' (" + spec_.type + ") is not a loss");
}

void Layer::shape_error(const std::string& msg) const {
  fail(Exit::bad_input,
       spec_.where + ": layer " + std::to_string(spec_.index) + " '" + spec_.name + "' (" + spec_.type + "): " + msg,
       true);
}

void require_input(const LayerSpec& s, const Shape& in, int rank, const char* what, const std::string& prev_desc) {
  if (in.rank == rank && !in.is_tokens) return;
  fail(Exit::bad_input,
       s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): expects " + what +
           " input, but " + prev_desc + " outputs " + in.str() + (rank == 1 && !in.is_tokens ? "; add a flatten layer before it" : ""),
       true);
}

namespace layers {

WindowGeom window_geom(const LayerSpec& s, const Shape& in, int64_t channels) {
  WindowGeom g;
  g.c_in = in.c();
  g.h_in = in.h();
  g.w_in = in.w();
  g.kernel = s.kernel;
  g.stride = s.stride;
  g.padding = s.padding;
  const int64_t hp = in.h() + 2 * s.padding, wp = in.w() + 2 * s.padding;
  if (s.kernel > hp || s.kernel > wp)
    fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): kernel " +
                              std::to_string(s.kernel) + " does not fit the input " + in.str() + " with padding " +
                              std::to_string(s.padding), true);
  g.c_out = channels > 0 ? channels : g.c_in;
  g.h_out = (hp - s.kernel) / s.stride + 1;
  g.w_out = (wp - s.kernel) / s.stride + 1;
  return g;
}

}  // namespace layers

std::unique_ptr<Layer> make_layer(const LayerSpec& s, const Shape& in, const std::string& prev_desc) {
  const LayerType* t = find_layer_type(s.type);
  PT_CHECK(t, "make_layer: unregistered type " << s.type);
  return t->make(s, in, prev_desc);
}

}  // namespace pt
