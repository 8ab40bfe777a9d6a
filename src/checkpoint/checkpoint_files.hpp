// Internal to src/checkpoint: file names, the rank file layout, low-level helpers.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/checkpoint.hpp"

namespace pt {

constexpr int kCheckpointFormatVersion = 2;  // 2: one group per held stage (several stages per rank)

std::string step_dir_name(int64_t step);
std::string rank_file_name(int rank);
void fsync_path(const std::string& path, bool directory);
uint32_t file_crc32(const std::string& path, int64_t* size);
void remove_tree(const std::string& path);

// Open a rank file and read every dataset back (HDF5 metadata checksums, Fletcher32 data,
// dimensions bounded by the file size); "" when sound, else the problem naming file and dataset.
std::string read_all_datasets(const std::string& path);

// Read a dataset of a checkpoint file, refusing (before allocating) one that declares more
// elements than the file's size can hold: malformed or oversized dimensions.
std::vector<float> read_floats_bounded(hid_t loc, const std::string& name, const std::string& path);
std::vector<int64_t> read_int64s_bounded(hid_t loc, const std::string& name, const std::string& path);

// The manifest of a checkpoint (files[r] = {bytes, crc32} of rank r's file), written as
// manifest.json.tmp, fsynced, renamed into place (`before_rename` runs just before: a test
// hook) and the folder fsynced. Throws Exit::io naming the path and errno.
std::string manifest_text(const CheckpointMeta& meta, const std::vector<std::pair<int64_t, uint32_t>>& files);
void write_manifest(const std::string& step_dir, const CheckpointMeta& meta,
                    const std::vector<std::pair<int64_t, uint32_t>>& files, const std::function<void()>& before_rename = {});

// One rank's HDF5 file (layout in docs/CHECKPOINT.md). Throws Exit::io naming the file.
// The OS error behind an HDF5 failure (errno and its text) is appended to the message.
void write_rank_file(const std::string& path, const std::vector<WorkerState>& st, const CheckpointMeta& meta,
                     const std::vector<StageInfo>& info, int rank);
void write_rank_file_contents(const std::string& path, const std::vector<WorkerState>& st, const CheckpointMeta& meta,
                               const std::vector<StageInfo>& info, int rank);
// The group of a stage's state in a rank file.
std::string stage_group(int stage);

}  // namespace pt
