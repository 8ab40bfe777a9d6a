// The input deck: a TOML file plus --set overrides, parsed and validated into one
// settings object that is the only source of run settings. Every key is declared once with
// its member (keys.hpp): the sections' keys in src/deck/schema.cpp, each layer type's beside
// its class in src/layers. Enumerations are parsed once into enums; train.optimizer and
// train.lr_schedule into their registry entries (optim.hpp).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/device.hpp"
#include "pipetrain/enum_names.hpp"
#include "pipetrain/keys.hpp"
#include "pipetrain/layer_spec.hpp"
#include "pipetrain/placement.hpp"
#include "pipetrain/recompute.hpp"

namespace pt {

struct OptimizerDef;   // optim.hpp
struct LrScheduleDef;  // optim.hpp
struct OptimConfig;    // optim.hpp

// data.source
enum class DataSource : uint8_t { fashion_mnist, hdf5, synthetic, text, tokens };
template <>
struct EnumNames<DataSource> {
  static constexpr const char* names[] = {"fashion-mnist", "hdf5", "synthetic", "text", "tokens"};
};
// train.nonfinite: on a non-finite loss or gradient, abort the job or drop that update
enum class Nonfinite : uint8_t { abort, skip };
template <>
struct EnumNames<Nonfinite> {
  static constexpr const char* names[] = {"abort", "skip"};
};
// parallel.allreduce: the replica gradient reduction
enum class Allreduce : uint8_t { mpi, nccl };
template <>
struct EnumNames<Allreduce> {
  static constexpr const char* names[] = {"mpi", "nccl"};
};

struct ClusterLevel {
  int64_t ranks = 1;        // ranks in one component of this level (8 in a server, 64 in a rack)
  double bandwidth = 0.0;   // bytes/s of the links inside one component (between its sub-components)
  double latency = 0.0;     // seconds per message
};

struct Deck {
  std::string path;  // the deck file as given

  struct Run {
    std::string name, output_dir;
    Device device = Device::cpu;
    int64_t seed = 0;
    bool debug_versions = false, plots = true, initial_weights = false;
    double comm_timeout_s = 0;
  } run;

  struct Data {
    DataSource source = DataSource::fashion_mnist;
    std::string path, train, test;
    std::vector<int64_t> shape;
    int64_t classes = 0, train_samples = 0, test_samples = 0;
    int64_t seq_len = 0, vocab = 0;  // text/tokens: positions per sample, vocabulary size
    bool normalize = true;
  } data;

  struct Model {
    std::vector<LayerSpec> layers;
  } model;

  struct Train {
    int64_t batch_size = 0, epochs = 0, max_steps = 0, log_every = 0, eval_batch_size = 0;
    int64_t warmup_steps = 0, step_size = 0, eval_every = 0;
    const OptimizerDef* optimizer = nullptr;    // a registry entry (optim.hpp)
    const LrScheduleDef* lr_schedule = nullptr;  // a registry entry (optim.hpp)
    Nonfinite nonfinite = Nonfinite::abort;
    Precision precision = Precision::fp32;
    double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
    double gamma = 0, min_lr = 0, target_accuracy = 0, target_loss = 0;
    double clip_grad_norm = 0;  // 0 = off (clip.hpp)
    bool nesterov = false;
  } train;

  struct Parallel {
    bool split_auto = false;
    std::vector<int64_t> split;     // first layer index of stages 2..K
    std::vector<int64_t> replicas;  // per stage; empty = derive from the rank count
    std::string schedule, profile;  // schedule: a schedule registry name (schedule_registry.hpp)
    Allreduce allreduce = Allreduce::mpi;
    std::optional<Placement> placement;  // none: "auto", the schedule's
    int64_t microbatches = 1;
    // tensor parallelism: ranks per tensor group (parallel.hpp, TensorGrid), 1 = none, 0 = the
    // planner's choice (split = "auto"; resolve_auto_split sets it)
    int64_t tensor = 1;
    // activation recomputation: one mode for every stage, or one per stage (recompute.hpp)
    PerStage<Recompute> recompute = Recompute::none;
  } parallel;

  struct Checkpoint {
    std::string dir;
    int64_t every_steps = 0, keep = 0;
    double every_seconds = 0;
    bool at_end = true;
  } checkpoint;

  struct Cluster {
    std::vector<ClusterLevel> levels;
    double memory = 0;  // bytes per rank, 0 = no cap
    double peak_gflops = 0;  // the machine's matmul peak per rank in the run's precision, 0 = unknown
  } cluster;

  // Where a key was set ("deck.toml:12:1" or "--set train.lr=-1"), or "default".
  std::string where(const std::string& key) const;
  std::map<std::string, std::string> locations;

  // The fully resolved deck (every key, defaults filled in), as TOML.
  std::string effective_toml() const;
  // FNV-1a of the canonical [model] and [data] shape text: identifies the model.
  uint64_t model_hash() const;
  std::string model_text() const;
};

// Parse and validate. Throws pt::Error(Exit::bad_input, collective) with a located message.
Deck load_deck(const std::string& path, const std::vector<std::string>& sets);
Deck parse_deck_text(const std::string& text, const std::string& path, const std::vector<std::string>& sets);

// What an Optimizer needs from [train] (its registry entries and hyperparameters).
OptimConfig optim_config(const Deck::Train& t);

// A warm-up longer than the run (train.warmup_steps above its `total_steps` steps, which
// train.max_steps or train.epochs decide): a warning line naming both keys and where each was
// set, ending in a newline; "" otherwise. The learning rate then never reaches train.lr.
std::string warmup_warning(const Deck& d, int64_t total_steps);

// Documentation of every key: used by `pipetrain keys` and to generate docs/DECK.md.
struct KeyDoc {
  std::string key, type, default_value, range, doc;
};
std::vector<KeyDoc> deck_key_docs();
std::string deck_reference_markdown();

// Levenshtein-based suggestion: "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace pt
