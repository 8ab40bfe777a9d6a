// The per-rank checkpoint file: attributes describing the run and the cut at the root, and
// one group /stage_<s> per stage the rank holds: replica 0's parameters, stashed versions
// and optimizer state, and this rank's in-flight state of that stage.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "../util/h5.hpp"
#include "checkpoint_files.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"

namespace pt {
namespace {

// HDF5 reports a failed write(2) only on its error stack ("..., errno = 28, error message =
// 'No space left on device', ..."), and its return codes alone say nothing of the cause. While
// a rank file is written, an automatic error handler keeps the first such errno text.
std::string g_os_error;

herr_t keep_os_error(hid_t stack, void*) {
  H5Ewalk2(stack, H5E_WALK_DOWNWARD,
           [](unsigned, const H5E_error2_t* e, void*) -> herr_t {
             if (!g_os_error.empty() || !e->desc) return 0;
             const std::string d = e->desc;
             const size_t at = d.find("errno = ");
             if (at == std::string::npos) return 0;
             const int code = std::atoi(d.c_str() + at + 8);
             const size_t msg = d.find("error message = '", at);
             std::string text = msg == std::string::npos ? "" : d.substr(msg + 17, d.find('\'', msg + 17) - msg - 17);
             g_os_error = "errno " + std::to_string(code) + (text.empty() ? "" : ": " + text);
             return 0;
           },
           nullptr);
  return 0;
}

struct OsErrorCapture {
  OsErrorCapture() {
    g_os_error.clear();
    H5Eset_auto2(H5E_DEFAULT, keep_os_error, nullptr);
  }
  ~OsErrorCapture() { h5::quiet(); }
};

}  // namespace

void write_rank_file(const std::string& path, const std::vector<WorkerState>& st, const CheckpointMeta& meta,
                     const std::vector<StageInfo>& info, int rank) {
  if (fault_matches("ckpt-io", rank, -1, meta.step))
    fail(Exit::io, path + ": write failed: errno 5: Input/output error (injected by PIPETRAIN_FAULT)");
  OsErrorCapture capture;
  try {
    write_rank_file_contents(path, st, meta, info, rank);
  } catch (const Error& e) {
    if (g_os_error.empty()) throw;
    fail(e.code(), std::string(e.what()) + " (" + g_os_error + ")");
  }
}

namespace {

h5::Handle create_rank_file(const std::string& path) {
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl || H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
    fail(Exit::io, path + ": HDF5 file access properties failed");
  // the newest format: superblock v3 and object headers with checksums (FAULTS.md). The root's
  // attributes stay in its object header (compact storage, covered by that checksum): beyond 8
  // HDF5 moves them to a fractal heap whose blocks carry no checksum, where a flipped byte was
  // found only by the manifest's CRC-32.
  h5::Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (!fcpl || H5Pset_attr_phase_change(fcpl.id(), 1000, 900) < 0)
    fail(Exit::io, path + ": HDF5 file creation properties failed");
  h5::Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.id(), fapl.id()), H5Fclose);
  if (!f) fail(Exit::io, path + ": cannot create HDF5 file");
  return f;
}

// The run and the cut: the same in every stage the rank holds.
void write_rank_attributes(hid_t root, const WorkerState& st, const CheckpointMeta& meta, const std::vector<StageInfo>& info,
                           int rank, const std::string& path) {
  h5::attr_string(root, "format", "pipetrain-checkpoint", path);
  h5::attr_int(root, "format_version", kCheckpointFormatVersion, path);
  h5::attr_int(root, "rank", rank, path);
  std::vector<int64_t> stages;
  for (const StageInfo& i : info) stages.push_back(i.stage);
  h5::attr_ints(root, "stages", stages, path);
  h5::attr_int(root, "replica", info.front().replica, path);
  h5::attr_int(root, "step", meta.step, path);
  h5::attr_int(root, "epoch", meta.epoch, path);
  h5::attr_int(root, "epoch_steps", meta.epoch_steps, path);
  h5::attr_int(root, "epoch_start", meta.epoch_start, path);
  h5::attr_int(root, "epoch_complete", meta.epoch_complete ? 1 : 0, path);
  h5::attr_int(root, "position", st.position, path);
  h5::attr_double(root, "elapsed_train_s", st.elapsed_train_s, path);
  const WorkerState::Reporting& rep = st.reporting;
  const std::vector<double> totals = {rep.epoch_loss, rep.epoch_samples, rep.interval_loss, rep.interval_samples,
                                      rep.epoch_time, rep.time_to_target};
  h5::write_floats64(root, "/reporting", totals.data(), {totals.size()}, true, path);
  h5::attr_int(root, "seed", meta.seed, path);
  h5::attr_int(root, "microbatches", meta.microbatches, path);
  h5::attr_int(root, "batch_size", meta.batch_size, path);
  h5::attr_string(root, "schedule", meta.schedule, path);
  h5::attr_string(root, "placement", meta.placement, path);
  h5::attr_string(root, "split", nlohmann::json(meta.split).dump(), path);
  h5::attr_string(root, "replicas", nlohmann::json(meta.replicas).dump(), path);
  h5::attr_string(root, "optimizer", meta.optimizer, path);
  h5::attr_string(root, "model_hash", meta.model_hash, path);
  h5::attr_string(root, "model_text", meta.model_text, path);
}

// Replica 0's parameters, versions and optimizer state (replicas hold identical ones).
void write_stage_parameters(hid_t root, const std::string& g, const WorkerState& st, const StageInfo& info, const std::string& path) {
  std::vector<int64_t> offs;
  for (size_t i = 0; i < info.layer_offsets.size(); ++i)
    offs.insert(offs.end(), {info.first_layer + static_cast<int64_t>(i), info.layer_offsets[i], info.layer_counts[i]});
  h5::write_int64s(root, g + "/layout/layers", offs.data(), {info.layer_offsets.size(), 3}, true, path);
  std::vector<int64_t> soffs;
  for (size_t i = 0; i < info.state_offsets.size(); ++i)
    soffs.insert(soffs.end(), {info.first_layer + static_cast<int64_t>(i), info.state_offsets[i], info.state_counts[i]});
  h5::write_int64s(root, g + "/layout/state", soffs.data(), {info.state_offsets.size(), 3}, true, path);
  std::vector<int64_t> ids;
  for (auto& [id, w] : st.versions) {
    ids.push_back(id);
    h5::write_floats(root, g + "/versions/" + std::to_string(id), w.data(), {w.size()}, true, path);
  }
  h5::write_int64s(root, g + "/versions_held", ids.data(), {ids.size()}, true, path);
  for (size_t i = 0; i < st.optimizer.size(); ++i)
    h5::write_floats(root, g + "/optimizer/" + info.optimizer_names[i], st.optimizer[i].data(), {st.optimizer[i].size()}, true, path);
}

void write_stage_inflight(hid_t root, const std::string& g, const WorkerState& st, const std::string& path) {
  std::vector<int64_t> mbs;
  for (auto& u : st.units) {
    mbs.push_back(u.mb);
    const std::string ug = g + "/inflight/" + std::to_string(u.mb);
    h5::write_floats(root, ug + "/slot", u.slot.data(), {u.slot.size()}, true, path);
    h5::Handle grp(H5Gopen2(root, ug.c_str(), H5P_DEFAULT), H5Gclose);
    h5::attr_double(grp.id(), "loss", u.loss, path);
    h5::attr_int(grp.id(), "fwd_version", u.fwd_version, path);
  }
  h5::write_int64s(root, g + "/inflight_units", mbs.data(), {mbs.size()}, true, path);
  std::vector<int64_t> actions;
  for (size_t k = 0; k < st.crossing.size(); ++k) {
    actions.push_back(st.crossing[k].action);
    h5::write_floats(root, g + "/crossing/" + std::to_string(k), st.crossing[k].payload.data(), {st.crossing[k].payload.size()},
                     true, path);
  }
  h5::write_int64s(root, g + "/crossing_actions", actions.data(), {actions.size()}, true, path);
}

void write_stage_group(hid_t root, const WorkerState& st, const StageInfo& info, const std::string& path) {
  const std::string g = stage_group(info.stage);
  h5::Handle grp = h5::create_group(root, g, path);
  h5::attr_int(grp.id(), "stage", info.stage, path);
  h5::attr_int(grp.id(), "first_layer", info.first_layer, path);
  h5::attr_int(grp.id(), "end_layer", info.end_layer, path);
  h5::attr_int(grp.id(), "latest_version", st.latest, path);
  h5::attr_int(grp.id(), "optimizer_updates", st.optimizer_updates, path);
  h5::attr_string(grp.id(), "optimizer_state", nlohmann::json(info.optimizer_names).dump(), path);
  h5::attr_string(grp.id(), "recompute", enum_name(st.recompute), path);  // how inflight/*/slot is laid out
  if (st.precision) h5::attr_string(grp.id(), "precision", enum_name(*st.precision), path);  // and the dtypes in it
  if (info.replica == 0) write_stage_parameters(root, g, st, info, path);
  // running statistics differ between replicas (each sees its own microbatches): every rank keeps its own
  h5::write_floats(root, g + "/state", st.state.data(), {st.state.size()}, true, path);
  write_stage_inflight(root, g, st, path);
}

}  // namespace

std::string stage_group(int stage) { return "/stage_" + std::to_string(stage); }

void write_rank_file_contents(const std::string& path, const std::vector<WorkerState>& st, const CheckpointMeta& meta,
                               const std::vector<StageInfo>& info, int rank) {
  PT_CHECK(!st.empty() && st.size() == info.size(), "checkpoint of " << st.size() << " stage states, " << info.size() << " infos");
  h5::Handle f = create_rank_file(path);
  write_rank_attributes(f.id(), st.front(), meta, info, rank, path);
  for (size_t k = 0; k < st.size(); ++k) write_stage_group(f.id(), st[k], info[k], path);
  if (H5Fflush(f.id(), H5F_SCOPE_GLOBAL) < 0) fail(Exit::io, path + ": flush failed (disk full?)");
  if (!f.close()) fail(Exit::io, path + ": close failed (disk full?)");
}

}  // namespace pt
