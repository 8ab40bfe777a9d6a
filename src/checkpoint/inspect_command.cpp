// `pipetrain inspect`: what a checkpoint holds (manifest, plan, step, versions per stage)
// and whether every file verifies.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "../util/h5.hpp"
#include "checkpoint_files.hpp"
#include "pipetrain/checkpoint.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

namespace {

// One held stage of a rank file: layers, position, units and messages in flight, versions.
void print_stage(hid_t h, const std::string& f, int rank, int stage, int64_t replica) {
  const std::string g = stage_group(stage);
  auto count = [&](const std::string& name) {  // a list's length from its shape: nothing is read
    const auto d = h5::dims(h, name, f);
    return d.size() == 1 ? static_cast<size_t>(d[0]) : size_t(0);
  };
  h5::Handle grp(H5Gopen2(h, g.c_str(), H5P_DEFAULT), H5Gclose);
  if (!grp) fail(Exit::bad_input, f + ": group " + g + " is missing");
  std::string versions = "(held by replica 0)";
  if (h5::exists(h, g + "/versions_held")) {
    versions.clear();
    for (int64_t v : read_int64s_bounded(h, g + "/versions_held", f)) versions += (versions.empty() ? "" : ", ") + std::to_string(v);
    versions = "versions [" + versions + "]";
  }
  std::printf("  rank %d: stage %d replica %lld, layers %lld-%lld, action %lld, %zu microbatches in flight, "
              "%zu messages in flight, %s\n",
              rank, stage, static_cast<long long>(replica), static_cast<long long>(h5::read_attr_int(grp.id(), "first_layer", f)),
              static_cast<long long>(h5::read_attr_int(grp.id(), "end_layer", f) - 1),
              static_cast<long long>(h5::read_attr_int(h, "position", f)), count(g + "/inflight_units"),
              count(g + "/crossing_actions"), versions.c_str());
}

}  // namespace

int cmd_inspect(const std::string& path) {
  const auto all = list_checkpoints(path);
  if (all.empty()) {
    std::printf("%s: no committed checkpoint (no step folder with a manifest.json)\n", path.c_str());
    return static_cast<int>(Exit::no_checkpoint);
  }
  int bad = 0;
  std::printf("%zu committed checkpoint%s under %s (newest first)\n", all.size(), all.size() == 1 ? "" : "s", path.c_str());
  for (const CheckpointRef& c : all) {
    std::printf("\n%s\n", c.step_dir.c_str());
    CheckpointMeta m;
    try {
      m = read_meta(c.step_dir);
    } catch (const Error& e) {
      std::printf("  INVALID: %s\n", e.what());
      ++bad;
      continue;
    }
    std::printf("  step %lld, epoch %lld%s, schedule %s, split %s, replicas %s, microbatches %d, batch %lld, ranks %d\n",
                static_cast<long long>(m.step), static_cast<long long>(m.epoch + 1),
                m.epoch_complete ? ", drained (segment end, after evaluation)" : ", mid-segment (pipeline state included)",
                m.schedule.c_str(),
                nlohmann::json(m.split).dump().c_str(), nlohmann::json(m.replicas).dump().c_str(), m.microbatches,
                static_cast<long long>(m.batch_size), m.ranks);
    std::printf("  model hash %s, seed %lld, optimizer %s\n", m.model_hash.c_str(), static_cast<long long>(m.seed), m.optimizer.c_str());
    for (int r = 0; r < m.ranks; ++r) {
      const std::string f = c.step_dir + "/" + rank_file_name(r);
      try {
        h5::Handle h = h5::open_file(f);
        const int64_t replica = h5::read_attr_int(h.id(), "replica", f);
        for (int64_t stage : h5::read_attr_ints(h.id(), "stages", f)) print_stage(h.id(), f, r, static_cast<int>(stage), replica);
      } catch (const Error& e) {
        std::printf("  rank %d: cannot read: %s\n", r, e.what());
      }
    }
    const std::string v = verify_checkpoint(c.step_dir);
    if (v.empty()) {
      std::printf("  verified: every file's size, HDF5 metadata, Fletcher32 data checksums and CRC32 match the manifest\n");
    } else {
      std::string lines = v;  // one problem per line, indented under the checkpoint
      for (size_t at = 0; (at = lines.find('\n', at)) != std::string::npos && at + 1 < lines.size(); at += 5)
        lines.replace(at, 1, "\n    ");
      std::printf("  INVALID:\n    %s", lines.c_str());
      ++bad;
    }
  }
  return bad ? static_cast<int>(Exit::bad_input) : 0;
}

}  // namespace pt
