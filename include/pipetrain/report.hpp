// Run outputs: the run directory, metrics.jsonl, summary.json, trace.json (Chrome trace
// format) and weights.h5. Files are written to a temporary name and renamed into place.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/schedule_ir.hpp"

namespace pt {

// Write a whole file atomically (tmp, fsync, rename); throws Exit::io naming the path.
void write_file_atomic(const std::string& path, const std::string& content);
void make_dirs(const std::string& path);  // mkdir -p; throws Exit::io
bool file_exists(const std::string& path);

class MetricsLog {
 public:
  MetricsLog() = default;
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void append(const std::string& json_line);  // one object per line, flushed
 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// One executed (or simulated) action for the trace: times in seconds from a common origin.
struct TraceEvent {
  int rank;
  double start, end;
  Op op;
  int32_t mb;
  int64_t bytes;
  int stage = 0;
};
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const Layout& layout, const std::string& title);

// Model weights by layer: /layers/NNN/{weight,bias} (PyTorch shapes); each layer group has
// the attributes name, type, index, in_shape, out_shape and its deck keys (out, channels,
// kernel, stride, padding, bias, p, eps as its type has them); the root has what rebuilding
// the model elsewhere needs: the input shape, classes, the input transform (mean, std) and
// the deck's model text (docs/ARCHITECTURE.md, "Run directory"; tools/to_pytorch.py).
void write_weights_h5(const std::string& path, const Model& model, const std::vector<std::vector<float>>& per_layer,
                      const Deck& deck, const InputTransform& input,
                      const std::vector<std::vector<float>>& per_layer_state = {});
// Read them back (tests, comparisons): per layer, the concatenated parameters.
std::vector<std::vector<float>> read_weights_h5(const std::string& path, const Model& model);
// Each layer's running state (empty for layers without one, or files without it).
std::vector<std::vector<float>> read_state_h5(const std::string& path, const Model& model);

// run.plots: draw RUN_DIR/timeline.png (and accuracy.png) with tools/plot.py and print their
// paths; prints why instead when Python, matplotlib or the script is missing. Never throws.
void write_run_plots(const std::string& run_dir);

}  // namespace pt
