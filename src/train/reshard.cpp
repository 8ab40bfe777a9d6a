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

// Floats of layers [first, l) of a model: layer l's offset in a stage starting at first.
int64_t offset_in_stage(const Model& m, int first, int l) { return m.num_params(first, l); }

// dst (this rank's part of layers [first, end) of `mine`) from the t_old parts src[k] of the
// same buffer (parameters or one optimizer buffer), laid out by the models `old[k]`.
void reshard_buffer(const std::vector<const float*>& src, const std::vector<Model>& old, const Model& mine, int first, int end,
                    float* dst) {
  const int t_old = static_cast<int>(old.size());
  const TensorShard me = mine.shard();
  std::vector<float> whole;
  for (int l = first; l < end; ++l) {
    const std::vector<ParamTensor> mp = mine.layer(l).params();
    for (size_t i = 0; i < mp.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : mp[i].full_shape.empty() ? mp[i].shape : mp[i].full_shape) n *= d;
      whole.assign(static_cast<size_t>(n), 0.0f);
      for (int k = 0; k < t_old; ++k) {
        const ParamTensor ok = old[static_cast<size_t>(k)].layer(l).params()[i];
        const float* part = src[static_cast<size_t>(k)] + offset_in_stage(old[static_cast<size_t>(k)], first, l) + ok.offset;
        place_shard(ok, old[static_cast<size_t>(k)].layer(l).spec().tensor_parts, k, part, whole.data());
      }
      take_shard(mp[i], mine.layer(l).spec().tensor_parts, me.rank, whole.data(),
                 dst + offset_in_stage(mine, first, l) + mp[i].offset);
    }
  }
}

}  // namespace

WorkerState load_resharded_state(const std::vector<std::string>& dirs, const std::vector<CheckpointMeta>& metas,
                                 const Deck& deck, const Model& mine, int first, int end, size_t optimizer_buffers) {
  const int t_old = static_cast<int>(dirs.size());
  std::vector<Model> old;
  std::vector<WorkerState> parts;
  for (int k = 0; k < t_old; ++k) {
    old.emplace_back(deck, mine.input_shape(), mine.classes(), TensorShard{t_old, k});
    const Model& m = old.back();
    size_t nstate = 0;
    for (int l = first; l < end; ++l) nstate += static_cast<size_t>(m.layer(l).num_state());
    parts.push_back(load_resliced_state(dirs[static_cast<size_t>(k)], metas[static_cast<size_t>(k)], first, end,
                                        static_cast<size_t>(m.num_params(first, end)), optimizer_buffers, nstate));
  }
  WorkerState st = parts.front();
  const size_t n = static_cast<size_t>(mine.num_params(first, end));
  std::vector<const float*> src;
  for (const WorkerState& p : parts) src.push_back(p.versions.back().second.data());
  st.versions.assign(1, {parts.front().versions.back().first, std::vector<float>(n)});
  reshard_buffer(src, old, mine, first, end, st.versions.back().second.data());
  for (size_t b = 0; b < optimizer_buffers; ++b) {
    src.clear();
    for (const WorkerState& p : parts) src.push_back(p.optimizer[b].data());
    st.optimizer[b].assign(n, 0.0f);
    reshard_buffer(src, old, mine, first, end, st.optimizer[b].data());
  }
  return st;
}

}  // namespace pt
