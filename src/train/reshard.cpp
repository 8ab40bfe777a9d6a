// Resharding on resume (parallel.tensor changed): every part of a checkpoint's split layers
// laid out whole, then cut for this rank's part (resume.hpp, load_resharded_state).
#include <cstdio>

#include "pipetrain/error.hpp"
#include "resume.hpp"

namespace pt {

std::string tensor_part_dir(const std::string& step_dir, int k) {
  if (k == 0) return step_dir;
  std::string p = step_dir;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : p.substr(0, slash);
  const std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  return folder + "/tensor" + std::to_string(k) + "/" + name;
}

namespace {

// dst (this rank's part of layers [first, end) of `mine`) from the t_old parts src[k] of the
// same buffer (parameters or one optimizer buffer), laid out by `old` (a part of the split
// into t_old; every part has its layout), through each layer's whole form (`whole`).
void reshard_buffer(const std::vector<const float*>& src, const Model& old, const Model& whole, const Model& mine,
                    int first, int end, float* dst) {
  std::vector<float> buf;
  std::vector<const float*> from(src.size());
  for (int l = first; l < end; ++l) {
    for (size_t k = 0; k < src.size(); ++k) from[k] = src[k] + old.num_params(first, l);
    buf.assign(static_cast<size_t>(whole.layer(l).num_params()), 0.0f);
    place_layer_parts(old.layer(l), whole.layer(l), from, buf.data());
    take_layer_part(mine.layer(l), whole.layer(l), buf.data(), dst + mine.num_params(first, l));
  }
}

}  // namespace

WorkerState load_resharded_state(const std::vector<std::string>& dirs, const std::vector<CheckpointMeta>& metas,
                                 const Deck& deck, const Model& mine, int first, int end, size_t optimizer_buffers) {
  const int t_old = static_cast<int>(dirs.size());
  const Model old(deck, mine.input_shape(), mine.classes(), TensorShard{t_old, 0}), whole(deck, mine.input_shape(), mine.classes());
  size_t nstate = 0;
  for (int l = first; l < end; ++l) nstate += static_cast<size_t>(old.layer(l).num_state());
  std::vector<WorkerState> parts;
  for (int k = 0; k < t_old; ++k)
    parts.push_back(load_resliced_state(dirs[static_cast<size_t>(k)], metas[static_cast<size_t>(k)], first, end,
                                        static_cast<size_t>(old.num_params(first, end)), optimizer_buffers, nstate));
  WorkerState st = parts.front();
  const size_t n = static_cast<size_t>(mine.num_params(first, end));
  std::vector<const float*> src;
  for (const WorkerState& p : parts) src.push_back(p.versions.back().second.data());
  st.versions.assign(1, {parts.front().versions.back().first, std::vector<float>(n)});
  reshard_buffer(src, old, whole, mine, first, end, st.versions.back().second.data());
  for (size_t b = 0; b < optimizer_buffers; ++b) {
    src.clear();
    for (const WorkerState& p : parts) src.push_back(p.optimizer[b].data());
    st.optimizer[b].assign(n, 0.0f);
    reshard_buffer(src, old, whole, mine, first, end, st.optimizer[b].data());
  }
  return st;
}

}  // namespace pt
