// Reading checkpoints: committed ones (with a manifest) newest first, full verification
// (sizes against the manifest, HDF5 metadata and Fletcher32 data, CRC32), this rank's
// state on the same layout, or parameters re-sliced for another layout.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../util/h5.hpp"
#include "checkpoint_files.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

// The most elements of `esz` bytes a dataset of this file can hold: no dataset is compressed,
// so one that declares more is malformed, and is rejected before anything is allocated.
static hsize_t max_elems(const std::string& path, size_t esz) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && st.st_size > 0 ? static_cast<hsize_t>(st.st_size) / esz : 0;
}
std::vector<float> read_floats_bounded(hid_t f, const std::string& name, const std::string& path) {
  return h5::read_floats(f, name, {}, path, max_elems(path, sizeof(float)));
}
std::vector<int64_t> read_int64s_bounded(hid_t f, const std::string& name, const std::string& path) {
  return h5::read_int64s(f, name, path, max_elems(path, sizeof(int64_t)));
}

namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

nlohmann::json read_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/manifest.json";
  std::ifstream in(path);
  if (!in) fail(Exit::bad_input, path + ": missing");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) fail(Exit::bad_input, path + ": empty");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    fail(Exit::bad_input, path + ": corrupt (not valid JSON: " + std::string(e.what()) + ")");
  }
  if (!m.is_object() || m.value("format", "") != "pipetrain-checkpoint-manifest")
    fail(Exit::bad_input, path + ": not a pipetrain checkpoint manifest");
  if (m.value("format_version", 0) != kCheckpointFormatVersion)
    fail(Exit::bad_input, path + ": format version " + std::to_string(m.value("format_version", 0)) + ", this build reads " +
                              std::to_string(kCheckpointFormatVersion));
  if (!m.contains("files") || !m["files"].is_array() || !m.contains("step") || !m["step"].is_number_integer() ||
      !m.contains("ranks") || !m["ranks"].is_number_integer())
    fail(Exit::bad_input, path + ": corrupt (no files, step or ranks)");
  // one entry per rank 0..ranks-1, each naming that rank's file with a size and a checksum
  const int64_t ranks = m["ranks"].get<int64_t>();
  if (ranks < 1 || ranks > (1 << 20) || static_cast<int64_t>(m["files"].size()) != ranks)
    fail(Exit::bad_input, path + ": corrupt (" + std::to_string(m["files"].size()) + " file entries for " +
                              std::to_string(ranks) + " ranks)");
  for (size_t r = 0; r < m["files"].size(); ++r) {
    const auto& f = m["files"][r];
    if (!f.is_object() || f.value("rank", -1) != static_cast<int>(r) || f.value("file", std::string()) != rank_file_name(static_cast<int>(r)) ||
        !f.contains("bytes") || !f["bytes"].is_number_integer() || !f.contains("crc32") || !f["crc32"].is_number_unsigned())
      fail(Exit::bad_input, path + ": corrupt (file entry " + std::to_string(r) + " is not {rank, file, bytes, crc32} for rank " +
                                std::to_string(r) + ")");
  }
  return m;
}

int64_t file_size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::vector<float> floats(hid_t f, const std::string& name, const std::string& path) { return read_floats_bounded(f, name, path); }

// The "optimizer_state" attribute: a JSON list of the optimizer buffers' names.
std::vector<std::string> optimizer_names(hid_t f, const std::string& path) {
  try {
    return nlohmann::json::parse(h5::read_attr_string(f, "optimizer_state", path)).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(Exit::bad_input, path + ": attribute optimizer_state is not a JSON list of names: " + e.what());
  }
}
std::vector<int64_t> int64s(hid_t f, const std::string& name, const std::string& path) { return read_int64s_bounded(f, name, path); }

}  // namespace

// Read every dataset of a file (Fletcher32 verifies chunked data); "" or the failure.
std::string read_all_datasets(const std::string& path) {
  h5::quiet();
  if (H5Fis_hdf5(path.c_str()) <= 0) return path + ": not an HDF5 file (signature damaged)";
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return path + ": HDF5 metadata corrupt (cannot open)";
  h5::Handle fh(f, H5Fclose);
  struct Ctx {
    std::string path, error;
    hsize_t file_bytes;
  } ctx{path, "", static_cast<hsize_t>(std::max<int64_t>(0, file_size(path)))};
  auto visit = [](hid_t obj, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    auto* c = static_cast<Ctx*>(data);
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t ds = H5Dopen2(obj, name, H5P_DEFAULT);
    if (ds < 0) {
      c->error = c->path + ": dataset /" + std::string(name) + " cannot be opened (corrupt metadata)";
      return 1;
    }
    h5::Handle dh(ds, H5Dclose);
    h5::Handle sp(H5Dget_space(ds), H5Sclose);
    h5::Handle t(H5Dget_type(ds), H5Tclose);
    const int rank = sp ? H5Sget_simple_extent_ndims(sp.id()) : -1;
    const size_t esz = t ? H5Tget_size(t.id()) : 0;
    const H5T_class_t cls = t ? H5Tget_class(t.id()) : H5T_NO_CLASS;
    if (rank < 0 || rank > 8 || esz == 0 || esz > 8 || (cls != H5T_FLOAT && cls != H5T_INTEGER)) {
      c->error = c->path + ": dataset /" + std::string(name) + " has a malformed rank or type";
      return 1;
    }
    // the byte count it declares, without overflow, against what the file actually stores:
    // checked before anything is allocated (FAULTS.md row 29)
    hsize_t d[8] = {0}, bytes = esz;
    if (rank > 0) H5Sget_simple_extent_dims(sp.id(), d, nullptr);
    for (int i = 0; i < rank; ++i) {
      if (d[i] != 0 && bytes > c->file_bytes / d[i]) {
        c->error = c->path + ": dataset /" + std::string(name) + " declares more data than the " +
                   std::to_string(c->file_bytes) + "-byte file holds (malformed dimensions; not allocated)";
        return 1;
      }
      bytes *= d[i];
    }
    const hsize_t stored = H5Dget_storage_size(ds);
    if (bytes > 0 && stored < bytes) {
      c->error = c->path + ": dataset /" + std::string(name) + " declares " + std::to_string(bytes) + " bytes but stores " +
                 std::to_string(stored) + " (malformed dimensions or missing chunks; not allocated)";
      return 1;
    }
    const hssize_t n = static_cast<hssize_t>(bytes / esz);
    std::vector<char> buf(static_cast<size_t>(bytes));
    if (n > 0 && H5Dread(ds, t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) {
      c->error = c->path + ": dataset /" + std::string(name) + " fails its Fletcher32 checksum or is truncated";
      return 1;
    }
    return 0;
  };
  if (H5Ovisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &ctx) < 0 && ctx.error.empty())
    ctx.error = path + ": HDF5 metadata corrupt (an object header or index fails its checksum or cannot be read)";
  return ctx.error;
}

std::string checkpoint_dir_of_run(const std::string& run_dir) { return run_dir + "/checkpoints"; }

int64_t checkpoint_step_of(const std::string& step_dir) {
  std::string d = step_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  const std::string base = slash == std::string::npos ? d : d.substr(slash + 1);
  if (base.rfind("step_", 0) != 0 || base.size() == 5 || base.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::atoll(base.c_str() + 5);
}

std::vector<std::string> uncommitted_checkpoints(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string dir = is_dir(p + "/checkpoints") ? p + "/checkpoints" : p;
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string full = dir + "/" + e->d_name;
    if (checkpoint_step_of(full) >= 0 && is_dir(full) && !file_exists(full + "/manifest.json")) out.push_back(full);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<CheckpointRef> list_checkpoints(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p.size() >= 13 && p.compare(p.size() - 13, 13, "manifest.json") == 0) p = p.substr(0, p.size() - 14);
  // a rank file (--resume .../step_N/rank_00000.h5) means its checkpoint
  if (p.size() > 3 && p.compare(p.size() - 3, 3, ".h5") == 0 && !is_dir(p) && p.find('/') != std::string::npos)
    p = p.substr(0, p.rfind('/'));
  if (file_exists(p + "/manifest.json")) {  // a step directory
    CheckpointRef r;
    r.step_dir = p;
    try {
      r.step = read_manifest(p).value("step", int64_t(0));
    } catch (const Error&) {
      r.step = -1;
    }
    return {r};
  }
  std::string dir = is_dir(p + "/checkpoints") ? p + "/checkpoints" : p;
  std::vector<CheckpointRef> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string full = dir + "/" + name;
    const int64_t step = checkpoint_step_of(full);  // step_<digits> only: never step_N.tmp
    if (step < 0 || !is_dir(full)) continue;
    if (!file_exists(full + "/manifest.json")) continue;  // never committed
    CheckpointRef r;
    r.step_dir = full;
    r.step = step;
    out.push_back(r);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const CheckpointRef& a, const CheckpointRef& b) { return a.step > b.step; });
  return out;
}

std::string verify_checkpoint(const std::string& step_dir, int only_rank) {
  nlohmann::json m;
  try {
    m = read_manifest(step_dir);
  } catch (const Error& e) {
    return e.what();
  }
  std::string errors;
  {  // the folder's name and the manifest agree on the step (list_checkpoints orders by the name)
    std::string d = step_dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const std::string base = d.substr(d.rfind('/') == std::string::npos ? 0 : d.rfind('/') + 1);
    if (base.rfind("step_", 0) == 0 && base != step_dir_name(m["step"].get<int64_t>()))
      errors += step_dir + "/manifest.json: step " + std::to_string(m["step"].get<int64_t>()) + " does not match the folder " +
                base + "\n";
  }
  for (auto& f : m["files"]) {
    const int r = f.value("rank", -1);
    if (only_rank >= 0 && r != only_rank) continue;
    const std::string path = step_dir + "/" + f.value("file", std::string("?"));
    const std::string who = " (rank " + std::to_string(r) + ")";
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      errors += path + who + ": missing\n";
      continue;
    }
    const int64_t want = f.value("bytes", int64_t(-1));
    if (st.st_size != want) {
      errors += path + who + ": size " + std::to_string(st.st_size) + " bytes differs from the manifest's " +
                std::to_string(want) + " (truncated or rewritten)\n";
      continue;
    }
    std::string e = read_all_datasets(path);
    if (e.empty()) {  // the file is the one the manifest means: its rank, step and format
      try {
        h5::Handle h = h5::open_file(path);
        const int64_t fr = h5::read_attr_int(h.id(), "rank", path), fs = h5::read_attr_int(h.id(), "step", path);
        const int64_t fv = h5::read_attr_int(h.id(), "format_version", path);
        if (fr != r || fs != m["step"].get<int64_t>() || fv != kCheckpointFormatVersion)
          e = path + ": attributes say rank " + std::to_string(fr) + ", step " + std::to_string(fs) + ", format " +
              std::to_string(fv) + "; the manifest expects rank " + std::to_string(r) + ", step " +
              std::to_string(m["step"].get<int64_t>()) + ", format " + std::to_string(kCheckpointFormatVersion);
      } catch (const Error& x) {
        e = x.what();
      }
    }
    if (!e.empty()) {
      errors += e + who + "\n";
      continue;
    }
    int64_t size = 0;
    const uint32_t crc = file_crc32(path, &size);
    if (crc != f.value("crc32", uint32_t(0)))
      errors += path + who + ": CRC32 " + std::to_string(crc) + " differs from the manifest's " +
                std::to_string(f.value("crc32", uint32_t(0))) + "\n";
  }
  return errors;
}

CheckpointMeta read_meta(const std::string& step_dir) {
  nlohmann::json m = read_manifest(step_dir);
  CheckpointMeta c;
  try {
    c.step = m.at("step");
    c.epoch = m.at("epoch");
    c.epoch_steps = m.at("epoch_steps");
    c.epoch_start = m.at("epoch_start");
    c.epoch_complete = m.at("epoch_complete");
    c.schedule = m.at("schedule");
    c.placement = m.value("placement", std::string("contiguous"));
    c.split = m.at("split").get<std::vector<int>>();
    c.replicas = m.at("replicas").get<std::vector<int>>();
    c.microbatches = m.at("microbatches");
    c.batch_size = m.at("batch_size");
    c.seed = m.at("seed");
    c.optimizer = m.at("optimizer");
    c.model_hash = m.at("model_hash");
    c.model_text = m.at("model_text");
    c.ranks = m.at("ranks");
    c.tensor_parts = m.value("tensor_parts", 1);
    c.tensor_rank = m.value("tensor_rank", 0);
  } catch (const std::exception& e) {
    fail(Exit::bad_input, step_dir + "/manifest.json: corrupt: " + e.what());
  }
  return c;
}

static std::string rank_path(const std::string& step_dir, int rank) { return step_dir + "/" + rank_file_name(rank); }

Layout checkpoint_layout(const CheckpointMeta& meta, int layers) {
  std::vector<int> first = {0};
  for (int v : meta.split) first.push_back(v);
  return Layout::make(first, layers, meta.replicas, placement_from_name(meta.placement));
}

namespace {

// The rank of the checkpoint's layout that holds replica 0 of `stage`.
int replica0_rank(const CheckpointMeta& meta, int stage) {
  const Layout old = checkpoint_layout(meta, 1 << 30);  // any layer count past the split
  return old.rank_of(stage, 0);
}

// One held stage's state from group g of this rank's file (own) and of replica 0's (shared).
WorkerState load_stage(hid_t f, const std::string& own, hid_t f0, const std::string& shared, int stage) {
  WorkerState st;
  st.stage = stage;
  const std::string g = stage_group(stage);
  h5::Handle grp(H5Gopen2(f, g.c_str(), H5P_DEFAULT), H5Gclose);
  if (!grp) fail(Exit::bad_input, own + ": group " + g + " is missing");
  st.latest = h5::read_attr_int(grp.id(), "latest_version", own);
  st.optimizer_updates = h5::read_attr_int(grp.id(), "optimizer_updates", own);
  st.recompute = Recompute::none;  // checkpoints from before parallel.recompute kept whole slots
  if (H5Aexists(grp.id(), "recompute") > 0) {
    const std::string r = h5::read_attr_string(grp.id(), "recompute", own);
    const std::optional<Recompute> e = enum_from_name<Recompute>(r);
    if (!e) fail(Exit::bad_input, own + ": " + g + " attribute recompute = '" + r + "' is not none, selective or full");
    st.recompute = *e;
  }
  if (H5Aexists(grp.id(), "precision") > 0) {  // absent before it was recorded
    const std::string r = h5::read_attr_string(grp.id(), "precision", own);
    const std::optional<Precision> e = enum_from_name<Precision>(r);
    if (!e) fail(Exit::bad_input, own + ": " + g + " attribute precision = '" + r + "' is not fp32 or bf16");
    st.precision = *e;
  }
  for (int64_t mb : int64s(f, g + "/inflight_units", own)) {
    WorkerState::Unit u;
    u.mb = static_cast<int32_t>(mb);
    const std::string ug = g + "/inflight/" + std::to_string(mb);
    u.slot = floats(f, ug + "/slot", own);
    h5::Handle ugrp(H5Gopen2(f, ug.c_str(), H5P_DEFAULT), H5Gclose);
    if (!ugrp) fail(Exit::bad_input, own + ": group " + ug + " is missing");
    u.loss = h5::read_attr_double(ugrp.id(), "loss", own);
    u.fwd_version = h5::read_attr_int(ugrp.id(), "fwd_version", own);
    st.units.push_back(std::move(u));
  }
  st.state = floats(f, g + "/state", own);
  const auto actions = int64s(f, g + "/crossing_actions", own);
  for (size_t k = 0; k < actions.size(); ++k) st.crossing.push_back({actions[k], floats(f, g + "/crossing/" + std::to_string(k), own)});
  for (int64_t id : int64s(f0, g + "/versions_held", shared))
    st.versions.emplace_back(id, floats(f0, g + "/versions/" + std::to_string(id), shared));
  h5::Handle g0(H5Gopen2(f0, g.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g0) fail(Exit::bad_input, shared + ": group " + g + " is missing");
  // A stage without parameters has no optimizer state; files written before that was said
  // list AdamW's names there without datasets.
  bool params = false;
  for (auto& v : st.versions) params = params || !v.second.empty();
  if (params)
    for (auto& n : optimizer_names(g0.id(), shared)) st.optimizer.push_back(floats(f0, g + "/optimizer/" + n, shared));
  return st;
}

}  // namespace

std::vector<WorkerState> load_worker_state(const std::string& step_dir, int rank) {
  const CheckpointMeta meta = read_meta(step_dir);
  const std::string own = rank_path(step_dir, rank);
  h5::Handle f = h5::open_file(own);
  WorkerState base;
  base.epoch = h5::read_attr_int(f.id(), "epoch", own);
  base.epoch_steps = h5::read_attr_int(f.id(), "epoch_steps", own);
  base.epoch_start = h5::read_attr_int(f.id(), "epoch_start", own);
  base.position = h5::read_attr_int(f.id(), "position", own);
  base.elapsed_train_s = h5::read_attr_double(f.id(), "elapsed_train_s", own);
  const std::vector<double> totals = h5::read_float64s(f.id(), "/reporting", {6}, own);
  base.reporting = {totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]};
  std::vector<WorkerState> out;
  for (int64_t stage : h5::read_attr_ints(f.id(), "stages", own)) {
    const std::string shared = rank_path(step_dir, replica0_rank(meta, static_cast<int>(stage)));
    h5::Handle f0 = h5::open_file(shared);
    WorkerState st = load_stage(f.id(), own, f0.id(), shared, static_cast<int>(stage));
    st.epoch = base.epoch, st.epoch_steps = base.epoch_steps, st.epoch_start = base.epoch_start;
    st.position = base.position, st.elapsed_train_s = base.elapsed_train_s, st.reporting = base.reporting;
    out.push_back(std::move(st));
  }
  return out;
}

namespace {

[[noreturn]] void needs_own_layout(const std::string& step_dir, const CheckpointMeta& meta, const std::string& why) {
  fail(Exit::bad_input, step_dir + ": " + why + "; it can only resume on its own layout (split " + nlohmann::json(meta.split).dump() +
                            ", replicas " + nlohmann::json(meta.replicas).dump() + ", placement " + meta.placement + ")", true);
}

// The parameters and optimizer state of the layers in [first, end) that old stage s holds,
// appended to the new stage's buffers at *at.
struct Reslice {
  std::vector<float> params, state;
  std::vector<std::vector<float>> opt;
  size_t at = 0, state_at = 0;
  int64_t filled = 0, updates = -1;
};

// Replica 0's running state of the layers in [first, end), appended at r.state_at.
void gather_state(hid_t f, const std::string& path, const std::string& g, int first, int end, Reslice& r) {
  const auto layout = int64s(f, g + "/layout/state", path);
  const auto st = floats(f, g + "/state", path);
  for (size_t i = 0; i + 2 < layout.size(); i += 3) {
    const int64_t layer = layout[i], off = layout[i + 1], cnt = layout[i + 2];
    if (layer < first || layer >= end || cnt == 0) continue;
    if (off < 0 || static_cast<size_t>(off + cnt) > st.size() || r.state_at + static_cast<size_t>(cnt) > r.state.size())
      fail(Exit::bad_input, path + ": " + g + "/layout/state entry for layer " + std::to_string(layer) + " is out of range");
    std::copy(st.begin() + off, st.begin() + off + cnt, r.state.begin() + static_cast<long>(r.state_at));
    r.state_at += static_cast<size_t>(cnt);
  }
}

void gather_stage(const std::string& step_dir, const CheckpointMeta& meta, int s, int first, int end, size_t optimizer_buffers,
                  Reslice& r) {
  const std::string path = rank_path(step_dir, replica0_rank(meta, s)), g = stage_group(s);
  h5::Handle f = h5::open_file(path);
  if (!int64s(f.id(), g + "/inflight_units", path).empty() || !int64s(f.id(), g + "/crossing_actions", path).empty())
    needs_own_layout(step_dir, meta, "the checkpoint holds microbatches in flight (" + meta.schedule + " without a flush)");
  const auto held = int64s(f.id(), g + "/versions_held", path);
  if (held.size() != 1)
    needs_own_layout(step_dir, meta, "stage " + std::to_string(s) + " holds " + std::to_string(held.size()) +
                                         " weight versions (stashed for " + meta.schedule + "); re-slicing needs one consistent version");
  const auto layers = int64s(f.id(), g + "/layout/layers", path);
  const auto w = floats(f.id(), g + "/versions/" + std::to_string(held[0]), path);
  h5::Handle grp(H5Gopen2(f.id(), g.c_str(), H5P_DEFAULT), H5Gclose);
  const auto names = optimizer_names(grp.id(), path);
  std::vector<std::vector<float>> o;  // none without parameters (older files list names there)
  if (!w.empty())
    for (auto& n : names) o.push_back(floats(f.id(), g + "/optimizer/" + n, path));
  const int64_t u = h5::read_attr_int(grp.id(), "optimizer_updates", path);
  gather_state(f.id(), path, g, first, end, r);
  // The errors below depend on this rank's part of the model, so they are not collective:
  // the rank that finds one aborts the job with it.
  for (size_t i = 0; i + 2 < layers.size(); i += 3) {
    const int64_t layer = layers[i], off = layers[i + 1], cnt = layers[i + 2];
    if (layer < first || layer >= end) continue;
    if (off < 0 || cnt < 0 || static_cast<size_t>(off + cnt) > w.size())
      fail(Exit::bad_input, path + ": " + g + "/layout/layers entry for layer " + std::to_string(layer) + " is out of range");
    r.updates = std::max(r.updates, u);
    if (cnt == 0) continue;  // a layer without parameters (a stage of such layers has no optimizer state)
    if (names.size() != optimizer_buffers)
      fail(Exit::bad_input, path + ": optimizer state has " + std::to_string(names.size()) + " buffers, this run's optimizer " +
                                std::to_string(optimizer_buffers));
    for (auto& b : o)
      if (static_cast<size_t>(off + cnt) > b.size())
        fail(Exit::bad_input, path + ": optimizer state is shorter than the parameters of layer " + std::to_string(layer));
    if (r.at + static_cast<size_t>(cnt) > r.params.size())
      fail(Exit::bad_input, path + ": layer " + std::to_string(layer) + " has " + std::to_string(cnt) +
                                " parameters, more than the new stage expects");
    std::copy(w.begin() + off, w.begin() + off + cnt, r.params.begin() + static_cast<long>(r.at));
    for (size_t b = 0; b < o.size(); ++b) std::copy(o[b].begin() + off, o[b].begin() + off + cnt, r.opt[b].begin() + static_cast<long>(r.at));
    r.at += static_cast<size_t>(cnt);
    r.filled += cnt;
  }
}

}  // namespace

WorkerState load_resliced_state(const std::string& step_dir, const CheckpointMeta& meta, int first, int end,
                                size_t nparams, size_t optimizer_buffers, size_t nstate) {
  WorkerState st;
  st.epoch = meta.epoch;
  st.epoch_steps = meta.epoch_steps;
  st.epoch_start = meta.epoch_start;
  st.latest = meta.step;
  Reslice r;
  r.params.assign(nparams, 0.0f);
  r.state.assign(nstate, 0.0f);
  r.opt.assign(optimizer_buffers, std::vector<float>(nparams, 0.0f));
  // only the old stages overlapping [first, end): the files resume's needed_ranks verified
  const int old_stages = static_cast<int>(meta.split.size()) + 1;
  for (int s = 0; s < old_stages; ++s) {
    const int old_first = s == 0 ? 0 : meta.split[static_cast<size_t>(s) - 1];
    const bool last = s + 1 == old_stages;
    if (old_first < end && (last || meta.split[static_cast<size_t>(s)] > first))
      gather_stage(step_dir, meta, s, first, end, optimizer_buffers, r);
  }
  if (static_cast<size_t>(r.filled) != nparams)
    fail(Exit::bad_input, step_dir + ": found " + std::to_string(r.filled) + " of the " + std::to_string(nparams) +
                              " parameters of layers " + std::to_string(first) + ".." + std::to_string(end - 1));
  if (r.state_at != nstate)
    fail(Exit::bad_input, step_dir + ": found " + std::to_string(r.state_at) + " of the " + std::to_string(nstate) +
                              " running-state values of layers " + std::to_string(first) + ".." + std::to_string(end - 1));
  st.state = std::move(r.state);
  st.versions.emplace_back(meta.step, std::move(r.params));
  st.optimizer = std::move(r.opt);
  st.optimizer_updates = std::max<int64_t>(r.updates, 0);
  return st;
}

std::string model_difference(const std::string& a, const std::string& b) {
  // canonical text: "data.source = ...\n" then "[[model.layers]]" blocks of "key = value" lines
  auto blocks = [](const std::string& t) {
    std::vector<std::map<std::string, std::string>> out(1);
    std::stringstream ss(t);
    for (std::string line; std::getline(ss, line);) {
      if (line == "[[model.layers]]") {
        out.emplace_back();
        continue;
      }
      auto eq = line.find(" = ");
      if (eq != std::string::npos) out.back()[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return out;
  };
  auto A = blocks(a), B = blocks(b);
  std::string diff;
  for (auto& [k, v] : A[0])
    if (B[0].count(k) && B[0][k] != v) diff += "  " + k + ": " + v + " in the checkpoint, " + B[0][k] + " in the deck\n";
  if (A.size() != B.size())
    diff += "  the checkpoint's model has " + std::to_string(A.size() - 1) + " layers, the deck's " + std::to_string(B.size() - 1) + "\n";
  for (size_t i = 1; i < std::min(A.size(), B.size()); ++i)
    for (auto& [k, v] : A[i]) {
      auto it = B[i].find(k);
      const std::string other = it == B[i].end() ? "(absent)" : it->second;
      if (other != v)
        diff += "  layer " + std::to_string(i - 1) + " " + k + ": " + v + " in the checkpoint, " + other + " in the deck\n";
    }
  return diff;
}

}  // namespace pt
