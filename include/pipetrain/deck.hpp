// The input deck: a TOML file plus --set overrides, parsed and validated into one
// settings object that is the only source of run settings.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pt {

struct LayerSpec {
  int index = 0;
  std::string type;   // a registered layer type (layers.hpp; docs/MODELS.md)
  std::string name;   // optional label (defaults to "<type><index>")
  int64_t out = 0;        // linear: output features
  int64_t channels = 0;   // conv2d: output channels
  int64_t kernel = 0;     // conv2d, pooling
  int64_t stride = 0;     // conv2d (default 1), pooling (default = kernel)
  int64_t padding = 0;
  bool bias = true;
  double p = 0.0;         // dropout probability
  double eps = 1e-5;      // layernorm, batchnorm2d, lm_head epsilon
  int64_t dim = 0;        // embedding: model width D
  int64_t heads = 0;      // attention, transformer_block
  int64_t mlp_ratio = 4;  // transformer_block: MLP hidden width / D
  double momentum = 0.1;  // batchnorm2d running statistics
  std::string tie;        // lm_head: name of the embedding layer whose token weight it mirrors
  bool head_bias = false; // lm_head `bias` (default false)
  // Filled by Model, not deck keys: the data's classes (the vocabulary of token data), and
  // the index of the layer `tie` names (-1: none).
  int64_t classes = 0;
  int tie_layer = -1;
  std::string where;      // "deck.toml:LINE:COL" of its [[model.layers]] table
};

struct ClusterLevel {
  int64_t ranks = 1;        // ranks in one component of this level (8 in a server, 64 in a rack)
  double bandwidth = 0.0;   // bytes/s of the links inside one component (between its sub-components)
  double latency = 0.0;     // seconds per message
};

struct Deck {
  std::string path;  // the deck file as given

  struct Run {
    std::string name, output_dir, device;
    int64_t seed = 0;
    bool debug_versions = false, plots = true, initial_weights = false;
    double comm_timeout_s = 0;
  } run;

  struct Data {
    std::string source, path, train, test;
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
    std::string optimizer, lr_schedule, nonfinite, precision;
    double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
    double gamma = 0, min_lr = 0, target_accuracy = 0, target_loss = 0;
    bool nesterov = false;
  } train;

  struct Parallel {
    bool split_auto = false;
    std::vector<int64_t> split;     // first layer index of stages 2..K
    std::vector<int64_t> replicas;  // per stage; empty = derive from the rank count
    std::string schedule, profile, allreduce, placement;
    int64_t microbatches = 1;
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

// Documentation of every key: used by `pipetrain keys` and to generate docs/DECK.md.
struct KeyDoc {
  std::string key, type, default_value, range, doc;
};
std::vector<KeyDoc> deck_key_docs();
std::string deck_reference_markdown();

// Known layer types (the layer registry's names, layers.hpp), for messages and docs.
std::vector<std::string> known_layer_types();

// A deck key's value type and allowed range (docs/DECK.md prints both). Layer types
// declare their keys with these (layers.hpp, LayerType::keys).
enum class KeyKind { Int, Float, Bool, String, Enum, IntList, SplitOrAuto };
struct KeyRange {
  bool has_lo = false, lo_open = false, has_hi = false, hi_open = false;
  double lo = 0, hi = 0;
};
KeyRange key_ge(double v);
KeyRange key_gt(double v);
KeyRange key_between(double lo, double hi, bool hi_open = false);
// One key of a [[model.layers]] table; `field` returns the LayerSpec member it fills
// (Int -> int64_t, Float -> double, Bool -> bool, String -> std::string).
struct LayerKey {
  std::string key;
  KeyKind kind;
  bool required;
  KeyRange range;
  std::string doc;
  std::function<void*(LayerSpec&)> field;
};

// A layer's deck keys for its type with their resolved values (defaults filled in), in schema
// order: what weights.h5 records per layer. kind 'i' integer, 'f' float, 'b' boolean (0/1 in i).
struct LayerSetting {
  std::string key;
  char kind = 'i';
  int64_t i = 0;
  double f = 0;
};
std::vector<LayerSetting> layer_settings(const LayerSpec& l);

// Levenshtein-based suggestion: "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace pt
