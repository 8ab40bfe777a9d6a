// Internal to src/checkpoint: file names, the rank file layout, low-level helpers.
#pragma once
#include <cstdint>
#include <string>

#include "pipetrain/checkpoint.hpp"

namespace pt {

constexpr int kCheckpointFormatVersion = 1;

std::string step_dir_name(int64_t step);
std::string rank_file_name(int rank);
void fsync_path(const std::string& path, bool directory);
uint32_t file_crc32(const std::string& path, int64_t* size);
void remove_tree(const std::string& path);

// One rank's HDF5 file (layout in docs/CHECKPOINT.md). Throws Exit::io naming the file.
void write_rank_file(const std::string& path, const WorkerState& st, const CheckpointMeta& meta, const StageInfo& info,
                     int rank);

}  // namespace pt
