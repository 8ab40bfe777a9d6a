// Writing checkpoints: per-rank HDF5 files (newest format: checksummed metadata; datasets
// chunked with Fletcher32), and the commit protocol: write *.tmp with every return code
// checked, fsync, rename, agree across ranks, then the manifest (sizes and CRC32 of every
// file) is written, fsynced and renamed into place, the directory fsynced, and only then
// are old checkpoints pruned. FAULTS.md: HDF5 never fsyncs and H5Fclose can succeed on a
// full disk, so nothing here trusts a close alone.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <signal.h>

#include "../util/h5.hpp"
#include "checkpoint_files.hpp"
#include "pipetrain/checkpoint.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"
#include "pipetrain/report.hpp"

namespace pt {

std::string step_dir_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%012lld", static_cast<long long>(step));
  return b;
}

std::string rank_file_name(int rank) {
  char b[32];
  std::snprintf(b, sizeof b, "rank_%05d.h5", rank);
  return b;
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) fail(Exit::io, path + ": cannot open for fsync: " + std::strerror(errno));
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail(Exit::io, path + ": fsync failed: " + std::strerror(e));
  }
  ::close(fd);
}

uint32_t file_crc32(const std::string& path, int64_t* size) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(Exit::io, path + ": cannot read: " + std::strerror(errno));
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t total = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32(crc, buf.data(), static_cast<uInt>(n));
    total += static_cast<int64_t>(n);
  }
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) fail(Exit::io, path + ": read error while computing its checksum");
  if (size) *size = total;
  return static_cast<uint32_t>(crc);
}

void remove_tree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) {
    ::unlink(path.c_str());
    return;
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    remove_tree(path + "/" + name);
  }
  closedir(d);
  ::rmdir(path.c_str());
}

static void fault_kill(const char* phase, int rank, int64_t step) {
  if (fault_matches("ckpt-kill", rank, -1, step, phase)) {
    std::fprintf(stderr, "rank %d: injected SIGKILL in checkpoint phase '%s' at step %lld\n", rank, phase,
                 static_cast<long long>(step));
    std::fflush(stderr);
    raise(SIGKILL);
  }
}

std::string manifest_text(const CheckpointMeta& meta, const std::vector<std::pair<int64_t, uint32_t>>& files) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t r = 0; r < files.size(); ++r)
    list.push_back({{"rank", static_cast<int>(r)}, {"file", rank_file_name(static_cast<int>(r))}, {"bytes", files[r].first},
                    {"crc32", files[r].second}});
  nlohmann::json m = {{"format", "pipetrain-checkpoint-manifest"},
                      {"format_version", kCheckpointFormatVersion},
                      {"step", meta.step},
                      {"epoch", meta.epoch},
                      {"epoch_steps", meta.epoch_steps},
                      {"epoch_start", meta.epoch_start},
                      {"epoch_complete", meta.epoch_complete},
                      {"schedule", meta.schedule},
                      {"placement", meta.placement},
                      {"split", meta.split},
                      {"replicas", meta.replicas},
                      {"microbatches", meta.microbatches},
                      {"batch_size", meta.batch_size},
                      {"seed", meta.seed},
                      {"optimizer", meta.optimizer},
                      {"model_hash", meta.model_hash},
                      {"model_text", meta.model_text},
                      {"ranks", static_cast<int>(files.size())},
                      {"tensor_parts", meta.tensor_parts},
                      {"tensor_rank", meta.tensor_rank},
                      {"files", list}};
  return m.dump(2) + "\n";
}

void write_manifest(const std::string& step_dir, const CheckpointMeta& meta,
                    const std::vector<std::pair<int64_t, uint32_t>>& files, const std::function<void()>& before_rename) {
  const std::string manifest = step_dir + "/manifest.json", tmp = manifest + ".tmp";
  const std::string text = manifest_text(meta, files);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(Exit::io, tmp + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(Exit::io, tmp + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(Exit::io, tmp + ": fsync failed: " + std::strerror(e));
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(Exit::io, tmp + ": close failed: " + std::strerror(e));
  }
  if (before_rename) before_rename();
  if (std::rename(tmp.c_str(), manifest.c_str()) != 0) fail(Exit::io, manifest + ": rename failed: " + std::strerror(errno));
  fsync_path(step_dir, true);  // the commit point: the manifest's name is durable
}

CheckpointWriter::CheckpointWriter(const ParallelContext& ctx, std::string dir, int keep)
    : ctx_(ctx), dir_(std::move(dir)), keep_(keep) {}

void CheckpointWriter::prepare() {
  // Every rank writes its own file here, so every rank proves it can (shared or local disk).
  int ok = 1;
  std::string why;
  try {
    make_dirs(dir_);
    const std::string probe = dir_ + "/.probe_rank" + std::to_string(ctx_.rank());
    write_file_atomic(probe, "pipetrain write probe\n");
    if (::unlink(probe.c_str()) != 0) fail(Exit::io, probe + ": cannot remove: " + std::strerror(errno));
  } catch (const Error& e) {
    ok = 0;
    why = e.what();
  }
  int counts[2] = {ok, 1 - ok}, sums[2] = {0, 0};  // ranks that can write it, ranks that cannot
  {
    MPI_Request req;
    MPI_Iallreduce(counts, sums, 2, MPI_INT, MPI_SUM, ctx_.world(), &req);
    ctx_.wait(&req, [] { return std::string("agreement on the checkpoint directory"); });
  }
  if (sums[0] == 0)  // the same failure everywhere (a shared directory): say it once, every rank exits 3
    fail(Exit::io, "checkpoint directory unusable (checkpoint.dir): " + why, true);
  if (sums[1] > 0) {
    if (!ok) fail(Exit::io, "checkpoint directory unusable on this rank (checkpoint.dir): " + why);
    fail(Exit::io, "checkpoint directory " + dir_ + " is not writable on " + std::to_string(sums[1]) + " other rank(s)", true);
  }
  if (ctx_.rank() == 0) {
    // stale temporaries and uncommitted step folders from a crash are never selected; clean them
    DIR* d = opendir(dir_.c_str());
    if (d) {
      std::vector<std::string> stale, committed;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        const std::string full = dir_ + "/" + name;
        if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) stale.push_back(full);
        else if (name.rfind("step_", 0) == 0 && !file_exists(full + "/manifest.json")) stale.push_back(full);
        else if (name.rfind("step_", 0) == 0) committed.push_back(full);
      }
      closedir(d);
      for (auto& c : committed) {  // temporaries left inside committed folders are not part of them
        if (DIR* cd = opendir(c.c_str())) {
          while (dirent* e = readdir(cd)) {
            const std::string name = e->d_name;
            if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) stale.push_back(c + "/" + name);
          }
          closedir(cd);
        }
      }
      for (auto& s : stale) {
        std::fprintf(stderr, "pipetrain: removing uncommitted checkpoint leftover %s\n", s.c_str());
        remove_tree(s);
      }
    }
  }
  // No rank goes on while rank 0 is still sweeping: a rank that wrote a *.tmp of its own
  // into the folder (checkpoint.dir = the run directory: the reporter's deck.toml.tmp) or
  // listed it would otherwise race with the clean-up.
  ctx_.barrier("checkpoint directory cleaned");
}

std::string CheckpointWriter::commit(const std::vector<WorkerState>& st, const CheckpointMeta& meta,
                                     const std::vector<StageInfo>& info) {
  const int rank = ctx_.rank();
  const std::string step_dir = dir_ + "/" + step_dir_name(meta.step);
  const std::string file = step_dir + "/" + rank_file_name(rank);
  if (rank == 0) {
    make_dirs(step_dir);
    // re-writing a step that was committed before (after a fallback): uncommit it first
    const std::string manifest = step_dir + "/manifest.json";
    if (file_exists(manifest)) {
      ::unlink(manifest.c_str());
      fsync_path(step_dir, true);
    }
  }
  ctx_.barrier("checkpoint directory created");
  make_dirs(step_dir);

  write_rank_file(file + ".tmp", st, meta, info, rank);
  fault_kill("written", rank, meta.step);
  fsync_path(file + ".tmp", false);
  // read it back: HDF5 can report success for a file that reads back wrong (FAULTS.md)
  if (const std::string bad = read_all_datasets(file + ".tmp"); !bad.empty())
    fail(Exit::io, "checkpoint file written with every return code checked does not read back: " + bad);
  if (std::rename((file + ".tmp").c_str(), file.c_str()) != 0)
    fail(Exit::io, file + ": rename from .tmp failed: " + std::strerror(errno));
  fsync_path(step_dir, true);
  int64_t size = 0;
  const uint32_t crc = file_crc32(file, &size);
  fault_kill("renamed", rank, meta.step);

  // agreement: every rank's file is durable; gather sizes and checksums for the manifest
  std::vector<double> mine = {static_cast<double>(size), static_cast<double>(crc)};
  std::vector<double> all(rank == 0 ? 2 * static_cast<size_t>(ctx_.size()) : 0);
  MPI_Request req;
  MPI_Igather(mine.data(), 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, ctx_.world(), &req);
  ctx_.wait(&req, [] { return std::string("checkpoint agreement (gathering file sizes and checksums)"); });
  if (rank != 0) return step_dir;

  fault_kill("agreed", rank, meta.step);
  std::vector<std::pair<int64_t, uint32_t>> files;
  for (int r = 0; r < ctx_.size(); ++r)
    files.emplace_back(static_cast<int64_t>(all[2 * static_cast<size_t>(r)]), static_cast<uint32_t>(all[2 * static_cast<size_t>(r) + 1]));
  write_manifest(step_dir, meta, files, [&] { fault_kill("manifest", rank, meta.step); });
  fault_kill("committed", rank, meta.step);
  try {  // a convenience for people: resume never reads it (it scans for the newest valid manifest)
    write_file_atomic(dir_ + "/latest", step_dir_name(meta.step) + "\n");
    fsync_path(dir_, true);
  } catch (const Error& e) {
    std::fprintf(stderr, "pipetrain: warning: step %lld is committed, but the 'latest' pointer was not updated: %s\n",
                 static_cast<long long>(meta.step), e.what());
  }

  // prune: of the committed checkpoints older than this one, all but the newest keep-1, oldest
  // last; a kill here leaves this one and the newest keep-1 older ones intact (the manifest goes
  // first, so a half-removed one is never selected). This one is never pruned, and neither is a
  // newer one (left by a run this one resumed before, e.g. after falling back from it).
  std::vector<CheckpointRef> older;
  for (const CheckpointRef& c : list_checkpoints(dir_))
    if (c.step < meta.step) older.push_back(c);
  for (size_t i = static_cast<size_t>(std::max(keep_ - 1, 0)); i < older.size(); ++i) {
    const std::string& old = older[i].step_dir;
    ::unlink((old + "/manifest.json").c_str());
    fsync_path(old, true);
    fault_kill("prune", rank, meta.step);
    remove_tree(old);
  }
  fsync_path(dir_, true);
  return step_dir;
}

}  // namespace pt
