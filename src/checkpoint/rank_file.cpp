// The per-rank checkpoint file: attributes describing the run and the cut, replica 0's
// parameters, stashed versions and optimizer state, and this rank's in-flight state.
#include <nlohmann/json.hpp>

#include "../util/h5.hpp"
#include "checkpoint_files.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"

namespace pt {

void write_rank_file(const std::string& path, const WorkerState& st, const CheckpointMeta& meta, const StageInfo& info,
                     int rank) {
  if (fault_matches("ckpt-io", rank, -1, meta.step))
    fail(Exit::io, path + ": write failed: Input/output error (injected by PIPETRAIN_FAULT)");
  h5::Handle f = h5::create_file(path);
  const hid_t root = f.id();
  h5::attr_string(root, "format", "pipetrain-checkpoint", path);
  h5::attr_int(root, "format_version", kCheckpointFormatVersion, path);
  h5::attr_int(root, "rank", rank, path);
  h5::attr_int(root, "stage", info.stage, path);
  h5::attr_int(root, "replica", info.replica, path);
  h5::attr_int(root, "first_layer", info.first_layer, path);
  h5::attr_int(root, "end_layer", info.end_layer, path);
  h5::attr_int(root, "step", meta.step, path);
  h5::attr_int(root, "epoch", meta.epoch, path);
  h5::attr_int(root, "epoch_steps", meta.epoch_steps, path);
  h5::attr_int(root, "epoch_start", meta.epoch_start, path);
  h5::attr_int(root, "epoch_complete", meta.epoch_complete ? 1 : 0, path);
  h5::attr_int(root, "position", st.position, path);
  h5::attr_int(root, "latest_version", st.latest, path);
  h5::attr_int(root, "optimizer_updates", st.optimizer_updates, path);
  h5::attr_double(root, "elapsed_train_s", st.elapsed_train_s, path);
  h5::attr_int(root, "seed", meta.seed, path);
  h5::attr_int(root, "microbatches", meta.microbatches, path);
  h5::attr_int(root, "batch_size", meta.batch_size, path);
  h5::attr_string(root, "schedule", meta.schedule, path);
  h5::attr_string(root, "split", nlohmann::json(meta.split).dump(), path);
  h5::attr_string(root, "replicas", nlohmann::json(meta.replicas).dump(), path);
  h5::attr_string(root, "optimizer", meta.optimizer, path);
  h5::attr_string(root, "model_hash", meta.model_hash, path);
  h5::attr_string(root, "model_text", meta.model_text, path);
  h5::attr_string(root, "optimizer_state", nlohmann::json(info.optimizer_names).dump(), path);

  if (info.replica == 0) {  // replicas hold identical parameters and optimizer state
    std::vector<int64_t> offs;
    for (size_t i = 0; i < info.layer_offsets.size(); ++i)
      offs.insert(offs.end(), {info.first_layer + static_cast<int64_t>(i), info.layer_offsets[i], info.layer_counts[i]});
    h5::write_int64s(root, "/layout/layers", offs.data(), {info.layer_offsets.size(), 3}, true, path);
    std::vector<int64_t> ids;
    for (auto& [id, w] : st.versions) {
      ids.push_back(id);
      h5::write_floats(root, "/versions/" + std::to_string(id), w.data(), {w.size()}, true, path);
    }
    h5::write_int64s(root, "/versions_held", ids.data(), {ids.size()}, true, path);
    for (size_t i = 0; i < st.optimizer.size(); ++i)
      h5::write_floats(root, "/optimizer/" + info.optimizer_names[i], st.optimizer[i].data(), {st.optimizer[i].size()},
                       true, path);
  }
  std::vector<int64_t> mbs;
  for (auto& u : st.units) {
    mbs.push_back(u.mb);
    const std::string g = "/inflight/" + std::to_string(u.mb);
    h5::write_floats(root, g + "/slot", u.slot.data(), {u.slot.size()}, true, path);
    h5::Handle grp(H5Gopen2(root, g.c_str(), H5P_DEFAULT), H5Gclose);
    h5::attr_double(grp.id(), "loss", u.loss, path);
    h5::attr_int(grp.id(), "fwd_version", u.fwd_version, path);
  }
  h5::write_int64s(root, "/inflight_units", mbs.data(), {mbs.size()}, true, path);
  std::vector<int64_t> actions;
  for (size_t k = 0; k < st.crossing.size(); ++k) {
    actions.push_back(st.crossing[k].action);
    h5::write_floats(root, "/crossing/" + std::to_string(k), st.crossing[k].payload.data(), {st.crossing[k].payload.size()},
                     true, path);
  }
  h5::write_int64s(root, "/crossing_actions", actions.data(), {actions.size()}, true, path);
  if (H5Fflush(root, H5F_SCOPE_GLOBAL) < 0) fail(Exit::io, path + ": flush failed (disk full?)");
  if (!f.close()) fail(Exit::io, path + ": close failed (disk full?)");
}

}  // namespace pt
