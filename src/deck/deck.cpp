// Deck parsing and validation: a schema of every key (type, default, range, doc),
// --set overrides, located error messages with did-you-mean, and the effective deck.
#include "pipetrain/deck.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

using Kind = KeyKind;
using Range = KeyRange;
Range ge(double v) { return key_ge(v); }
Range gt(double v) { return key_gt(v); }
Range between(double lo, double hi, bool hi_open = false) { return key_between(lo, hi, hi_open); }

// One deck key. `field` returns the address of the Deck member it fills; its C++ type
// follows `kind`: Int -> int64_t, Float -> double, Bool -> bool, String/Enum -> std::string,
// IntList -> std::vector<int64_t>, SplitOrAuto -> Deck::Parallel.
struct KeySpec {
  std::string key;
  Kind kind;
  std::string def;  // default, as TOML text; empty with required = true means required
  bool required;
  Range range;
  std::vector<std::string> choices;
  std::string doc;
  std::function<void*(Deck&)> field;
};

const std::vector<std::string> kSections = {"run", "data", "model", "train", "parallel", "checkpoint", "cluster"};

#define F(expr) [](Deck& d) -> void* { return &(expr); }

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> s = {
      {"run.name", Kind::String, "\"run\"", false, {}, {}, "run directory name under run.output_dir", F(d.run.name)},
      {"run.output_dir", Kind::String, "\"runs\"", false, {}, {}, "parent folder of run directories (relative to the working directory)", F(d.run.output_dir)},
      {"run.seed", Kind::Int, "1", false, ge(0), {}, "seed of every random stream (init, shuffle, dropout, synthetic data)", F(d.run.seed)},
      {"run.device", Kind::Enum, "\"cpu\"", false, {}, {"cpu", "cuda"}, "compute device (cuda needs a build with CUDA=1)", F(d.run.device)},
      {"run.debug_versions", Kind::Bool, "false", false, {}, {}, "write versions.jsonl: the weight version read by every forward and backward", F(d.run.debug_versions)},
      {"run.plots", Kind::Bool, "true", false, {}, {}, "after training, draw timeline.png and accuracy.png into the run directory (tools/plot.py, python3-matplotlib)", F(d.run.plots)},
      {"run.initial_weights", Kind::Bool, "false", false, {}, {}, "also write weights_init.h5, the initial weights and running state (tools/pytorch_twin.py loads them)", F(d.run.initial_weights)},
      {"run.comm_timeout_s", Kind::Float, "300.0", false, gt(0), {}, "deadline of every wait on a message or collective, seconds", F(d.run.comm_timeout_s)},

      {"data.source", Kind::Enum, "\"fashion-mnist\"", false, {}, {"fashion-mnist", "hdf5", "synthetic", "text", "tokens"}, "where samples come from (text and tokens: docs/DATA.md)", F(d.data.source)},
      {"data.path", Kind::String, "\"/usr/share/datasets/fashion-mnist\"", false, {}, {}, "fashion-mnist: folder of the four IDX .gz files; text: a plain-text file or a folder of them (when unset: /usr/share/games/fortunes)", F(d.data.path)},
      {"data.train", Kind::String, "\"\"", false, {}, {}, "hdf5: training file with /images (N,C,H,W or N,F float32/uint8) and /labels (N int); tokens: training tokens, a .bin of little-endian uint16 or a .h5/.hdf5 with a 1-D integer /tokens", F(d.data.train)},
      {"data.test", Kind::String, "\"\"", false, {}, {}, "hdf5: test file, same layout; tokens: test (validation) tokens, same formats", F(d.data.test)},
      {"data.shape", Kind::IntList, "[]", false, gt(0), {}, "synthetic: per-sample shape, e.g. [3, 64, 64]", F(d.data.shape)},
      {"data.classes", Kind::Int, "10", false, between(2, 1e9), {}, "synthetic: number of classes", F(d.data.classes)},
      {"data.train_samples", Kind::Int, "8192", false, gt(0), {}, "synthetic: training samples per epoch", F(d.data.train_samples)},
      {"data.test_samples", Kind::Int, "1024", false, gt(0), {}, "synthetic: test samples", F(d.data.test_samples)},
      {"data.normalize", Kind::Bool, "true", false, {}, {}, "fashion-mnist/uint8 hdf5: scale to [0,1] then standardise with the dataset mean and std", F(d.data.normalize)},
      {"data.seq_len", Kind::Int, "128", false, gt(0), {}, "text/tokens: positions per sample; a sample reads seq_len + 1 tokens and predicts the next one at each position", F(d.data.seq_len)},
      {"data.vocab", Kind::Int, "0", false, between(0, static_cast<double>(kMaxVocab)), {}, "tokens: vocabulary size, required (e.g. 50304 for GPT-2 tokens); text: 256, one token per byte", F(d.data.vocab)},

      {"train.batch_size", Kind::Int, "128", false, between(1, 1e7), {}, "samples per optimizer step (the minibatch)", F(d.train.batch_size)},
      {"train.epochs", Kind::Int, "1", false, between(1, 1e6), {}, "passes over the training set", F(d.train.epochs)},
      {"train.max_steps", Kind::Int, "0", false, ge(0), {}, "stop after this many optimizer steps in total (0 = no limit)", F(d.train.max_steps)},
      {"train.optimizer", Kind::Enum, "\"sgd\"", false, {}, {"sgd", "adamw"}, "optimizer", F(d.train.optimizer)},
      {"train.lr", Kind::Float, "0.05", false, gt(0), {}, "peak learning rate", F(d.train.lr)},
      {"train.momentum", Kind::Float, "0.9", false, between(0, 1, true), {}, "sgd momentum", F(d.train.momentum)},
      {"train.nesterov", Kind::Bool, "false", false, {}, {}, "sgd: Nesterov momentum", F(d.train.nesterov)},
      {"train.weight_decay", Kind::Float, "0.0", false, ge(0), {}, "L2 (sgd) or decoupled (adamw) weight decay, applied to every parameter", F(d.train.weight_decay)},
      {"train.beta1", Kind::Float, "0.9", false, between(0, 1, true), {}, "adamw beta1", F(d.train.beta1)},
      {"train.beta2", Kind::Float, "0.999", false, between(0, 1, true), {}, "adamw beta2", F(d.train.beta2)},
      {"train.eps", Kind::Float, "1e-08", false, gt(0), {}, "adamw epsilon", F(d.train.eps)},
      {"train.lr_schedule", Kind::Enum, "\"constant\"", false, {}, {"constant", "step", "cosine"}, "learning-rate schedule over optimizer steps", F(d.train.lr_schedule)},
      {"train.warmup_steps", Kind::Int, "0", false, ge(0), {}, "linear warm-up from lr/warmup_steps to lr over this many steps", F(d.train.warmup_steps)},
      {"train.step_size", Kind::Int, "1000", false, gt(0), {}, "step schedule: multiply by gamma every step_size steps", F(d.train.step_size)},
      {"train.gamma", Kind::Float, "0.1", false, gt(0), {}, "step schedule factor", F(d.train.gamma)},
      {"train.min_lr", Kind::Float, "0.0", false, ge(0), {}, "cosine schedule: final learning rate", F(d.train.min_lr)},
      {"train.target_accuracy", Kind::Float, "0.0", false, between(0, 1), {}, "record the wall time at which test accuracy first reaches this (0 = off)", F(d.train.target_accuracy)},
      {"train.target_loss", Kind::Float, "0.0", false, ge(0), {}, "record the wall time at which the test loss (nats) first falls to this (0 = off; text: 1.3863 nats = 2 bits per byte)", F(d.train.target_loss)},
      {"train.log_every", Kind::Int, "50", false, gt(0), {}, "steps between progress lines and metrics.jsonl records", F(d.train.log_every)},
      {"train.eval_every", Kind::Int, "0", false, ge(0), {}, "also evaluate every this many steps (0 = at epoch ends only); the pipeline drains there", F(d.train.eval_every)},
      {"train.eval_batch_size", Kind::Int, "500", false, between(1, 1e7), {}, "samples per microbatch when evaluating the test set", F(d.train.eval_batch_size)},
      {"train.precision", Kind::Enum, "\"fp32\"", false, {}, {"fp32", "bf16"}, "compute precision: bf16 = bf16 GEMM/conv inputs with fp32 accumulation, bf16 activations and stage messages; fp32 master weights, gradients, optimizer state, statistics and loss (docs/PRECISION.md)", F(d.train.precision)},
      {"train.nonfinite", Kind::Enum, "\"abort\"", false, {}, {"abort", "skip"}, "on a non-finite loss or gradient: abort the job, or drop that update deterministically", F(d.train.nonfinite)},

      {"parallel.split", Kind::SplitOrAuto, "[]", false, gt(0), {}, "first layer index of stages 2..K (e.g. [2, 4, 5]; p x v stages for looped/v placements), or \"auto\" to profile and plan", F(d.parallel)},
      {"parallel.replicas", Kind::IntList, "[]", false, between(1, 1e6), {}, "replicas per rank group (per stage when contiguous), group-major rank order (default: 1 each; one stage on N ranks: [N])", F(d.parallel.replicas)},
      {"parallel.schedule", Kind::Enum, "\"1f1b\"", false, {}, schedule_names(), "pipeline schedule (`pipetrain schedule --list` says what each does)", F(d.parallel.schedule)},
      {"parallel.placement", Kind::Enum, "\"auto\"", false, {}, {"auto", "contiguous", "looped", "v"}, "stages on ranks: contiguous (one stage per rank), looped (rank r holds r, r+p, ...), v (r and 2p-1-r); auto = the schedule's", F(d.parallel.placement)},
      {"parallel.microbatches", Kind::Int, "1", false, between(1, 1e6), {}, "microbatches per minibatch (flush schedules and 2bw); must divide train.batch_size", F(d.parallel.microbatches)},
      {"parallel.profile", Kind::String, "\"\"", false, {}, {}, "split = \"auto\": read this profile.json instead of profiling", F(d.parallel.profile)},
      {"parallel.allreduce", Kind::Enum, "\"mpi\"", false, {}, {"mpi", "nccl"}, "replica gradient reduction (nccl needs CUDA=1 and run.device = \"cuda\")", F(d.parallel.allreduce)},

      {"checkpoint.dir", Kind::String, "\"\"", false, {}, {}, "checkpoint folder (\"\" = <run dir>/checkpoints)", F(d.checkpoint.dir)},
      {"checkpoint.every_steps", Kind::Int, "0", false, ge(0), {}, "checkpoint every this many steps (0 = off)", F(d.checkpoint.every_steps)},
      {"checkpoint.every_seconds", Kind::Float, "0.0", false, ge(0), {}, "checkpoint when this much wall time passed since the last one (0 = off)", F(d.checkpoint.every_seconds)},
      {"checkpoint.at_end", Kind::Bool, "true", false, {}, {}, "checkpoint after the last step (for --resume with more epochs)", F(d.checkpoint.at_end)},
      {"checkpoint.keep", Kind::Int, "2", false, ge(1), {}, "committed checkpoints kept; older ones are pruned after a commit", F(d.checkpoint.keep)},

      {"cluster.memory", Kind::Float, "0.0", false, ge(0), {}, "planner: memory cap per rank in bytes (0 = none)", F(d.cluster.memory)},
  };
  return s;
}
#undef F

// The keys of each layer type, from the layer registry (layers.hpp).
const std::vector<LayerKey>& layer_keys(const std::string& type) { return find_layer_type(type)->keys; }

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::Int: return "integer";
    case Kind::Float: return "float";
    case Kind::Bool: return "boolean";
    case Kind::String: return "string";
    case Kind::Enum: return "string";
    case Kind::IntList: return "array of integers";
    case Kind::SplitOrAuto: return "array of integers or \"auto\"";
  }
  return "?";
}

std::string node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::string: return "string";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

std::string node_text(const toml::node& n) {
  std::ostringstream o;
  if (auto s = n.as_string()) {
    o << '"' << s->get() << '"';
  } else {
    n.visit([&](auto&& v) { o << v; });
  }
  std::string t = o.str();
  if (t.size() > 60) t = t.substr(0, 57) + "...";
  return t;
}

std::string fmt_num(double v) {
  std::ostringstream o;
  o << std::setprecision(12) << v;
  return o.str();
}

std::string range_text(const Range& r) {
  if (r.has_lo && r.has_hi)
    return std::string(r.lo_open ? "(" : "[") + fmt_num(r.lo) + ", " + fmt_num(r.hi) + (r.hi_open ? ")" : "]");
  if (r.has_lo) return std::string(r.lo_open ? "> " : ">= ") + fmt_num(r.lo);
  if (r.has_hi) return std::string(r.hi_open ? "< " : "<= ") + fmt_num(r.hi);
  return "";
}

bool in_range(const Range& r, double v) {
  if (r.has_lo && (r.lo_open ? !(v > r.lo) : !(v >= r.lo))) return false;
  if (r.has_hi && (r.hi_open ? !(v < r.hi) : !(v <= r.hi))) return false;
  return true;
}

std::string range_message(const Range& r) {
  if (r.has_lo && r.has_hi) return "must be in " + range_text(r);
  return "must be " + range_text(r);
}

// Shortest round-trip text of a double that TOML reads back as a float.
std::string toml_float(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string toml_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {  // TOML forbids raw control characters
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string toml_int_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// ---------------------------------------------------------------------------
// The parser: walks the TOML tree against the schema.

class Parser {
 public:
  Parser(std::string path, std::map<std::string, std::string> set_where, std::map<std::string, std::string> set_raw)
      : path_(std::move(path)), set_where_(std::move(set_where)), set_raw_(std::move(set_raw)) {}

  [[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& msg) const {
    fail(Exit::bad_input, where + ": key '" + key + "': " + msg, true);
  }

  // Where `key` was set: its --set argument, else the --set that created an enclosing
  // table (--set foo.bar=1 creates [foo]; --set 'train={lr=1}' replaces [train]), else
  // the node's line and column in the deck.
  std::string where(const toml::source_region& src, const std::string& key) const {
    for (std::string k = key;;) {
      auto it = set_where_.find(k);
      if (it != set_where_.end()) return it->second;
      auto dot = k.rfind('.');
      if (dot == std::string::npos) break;
      k.erase(dot);
    }
    if (src.path && *src.path != path_) return "command line";  // parsed from a --set value
    if (src.begin.line == 0) return path_;
    return path_ + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
  }
  std::string where(const toml::node& n, const std::string& key) const { return where(n.source(), key); }
  // Unknown keys are reported at the key itself, not at its value.
  std::string where(const toml::key& k, const toml::node& n, const std::string& key) const {
    return k.source().begin.line ? where(k.source(), key) : where(n, key);
  }

  // Convert one value to its kind and store it through `dst`.
  void store(const toml::node& n, const std::string& key, Kind kind, const Range& range,
             const std::vector<std::string>& choices, void* dst, Deck& deck) const {
    const std::string at = where(n, key);
    deck.locations[key] = at;
    auto wrong_type = [&]() {
      bad(at, key, "must be " + std::string(kind == Kind::Int ? "an " : "a ") + kind_name(kind) + ", got " +
                       node_text(n) + " (" + node_type_name(n) + ")");
    };
    switch (kind) {
      case Kind::Int: {
        auto v = n.as_integer();
        if (!v) wrong_type();
        if (!in_range(range, static_cast<double>(v->get())))
          bad(at, key, range_message(range) + ", got " + std::to_string(v->get()));
        *static_cast<int64_t*>(dst) = v->get();
        break;
      }
      case Kind::Float: {
        double x;
        if (auto f = n.as_floating_point()) x = f->get();
        else if (auto i = n.as_integer()) x = static_cast<double>(i->get());
        else wrong_type();
        if (!std::isfinite(x)) bad(at, key, "must be a finite number, got " + node_text(n));
        if (!in_range(range, x)) bad(at, key, range_message(range) + ", got " + node_text(n));
        *static_cast<double*>(dst) = x;
        break;
      }
      case Kind::Bool: {
        auto b = n.as_boolean();
        if (!b) wrong_type();
        *static_cast<bool*>(dst) = b->get();
        break;
      }
      case Kind::String:
      case Kind::Enum: {
        // A --set value that parsed as another TOML scalar (run.name=2024, a layer name=7)
        // is kept as typed: a string key takes the command-line text.
        auto raw = set_raw_.find(key);
        const bool from_set = raw != set_raw_.end() && !n.is_array() && !n.is_table();
        auto s = n.as_string();
        if (!s && !from_set) wrong_type();
        const std::string v = s ? std::string(s->get()) : raw->second;
        if (kind == Kind::Enum && std::find(choices.begin(), choices.end(), v) == choices.end()) {
          std::string known;
          for (auto& c : choices) known += (known.empty() ? "" : ", ") + c;
          std::string dym = did_you_mean(v, choices);
          bad(at, key, "unknown value '" + v + "'" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") +
                           " (known: " + known + ")");
        }
        *static_cast<std::string*>(dst) = v;
        break;
      }
      case Kind::IntList:
        *static_cast<std::vector<int64_t>*>(dst) = int_list(n, key, at, range);
        break;
      case Kind::SplitOrAuto: {
        auto* par = static_cast<Deck::Parallel*>(dst);
        if (auto s = n.as_string()) {
          if (s->get() != "auto") bad(at, key, "must be an array of layer indices or \"auto\", got " + node_text(n));
          par->split_auto = true;
          par->split.clear();
        } else {
          par->split_auto = false;
          par->split = int_list(n, key, at, range);
        }
        break;
      }
    }
  }

  std::vector<int64_t> int_list(const toml::node& n, const std::string& key, const std::string& at,
                                const Range& range) const {
    auto a = n.as_array();
    if (!a) bad(at, key, "must be an array of integers, got " + node_text(n) + " (" + node_type_name(n) + ")");
    std::vector<int64_t> out;
    for (size_t i = 0; i < a->size(); ++i) {
      auto v = (*a)[i].as_integer();
      if (!v)
        bad(at, key, "element " + std::to_string(i) + " must be an integer, got " + node_text((*a)[i]) + " (" +
                         node_type_name((*a)[i]) + ")");
      if (!in_range(range, static_cast<double>(v->get())))
        bad(at, key, "element " + std::to_string(i) + " " + range_message(range) + ", got " + std::to_string(v->get()));
      out.push_back(v->get());
    }
    return out;
  }

  void parse(const toml::table& root, Deck& deck) const {
    // Top level: only known sections, each a table.
    for (auto&& [k, v] : root) {
      std::string key(k.str());
      if (std::find(kSections.begin(), kSections.end(), key) == kSections.end()) {
        std::string dym = did_you_mean(key, kSections);
        bad(where(k, v, key), key,
            "unknown section" + (dym.empty() ? std::string() : "; did you mean [" + dym + "]?") +
                " (known sections: run, data, model, train, parallel, checkpoint, cluster)");
      }
      if (!v.is_table()) bad(where(v, key), key, "must be a table ([" + key + "]), got " + node_type_name(v));
    }
    if (!root.contains("model"))
      fail(Exit::bad_input, path_ + ": missing required section [model] (with [[model.layers]] entries)", true);

    // Known keys per section, for unknown-key checks and suggestions.
    std::map<std::string, std::vector<std::string>> known;
    for (auto& s : schema()) {
      auto dot = s.key.find('.');
      known[s.key.substr(0, dot)].push_back(s.key.substr(dot + 1));
    }
    known["model"].push_back("layers");
    known["cluster"].push_back("levels");

    for (auto&& [sk, sv] : root) {
      std::string section(sk.str());
      for (auto&& [k, v] : *sv.as_table()) {
        std::string key(k.str());
        auto& names = known[section];
        if (std::find(names.begin(), names.end(), key) == names.end()) {
          std::string dym = did_you_mean(key, names);
          std::string list;
          for (auto& nm : names) list += (list.empty() ? "" : ", ") + nm;
          bad(where(k, v, section + "." + key), section + "." + key,
              "unknown key" + (dym.empty() ? std::string() : "; did you mean '" + section + "." + dym + "'?") +
                  " (known keys of [" + section + "]: " + list + ")");
        }
      }
    }

    for (auto& s : schema()) {
      auto dot = s.key.find('.');
      const toml::node* n = root.at_path(s.key).node();
      // at_path also walks arrays; only accept a direct child of the section table
      if (auto sec = root[s.key.substr(0, dot)].as_table()) n = sec->get(s.key.substr(dot + 1));
      else n = nullptr;
      if (n) {
        store(*n, s.key, s.kind, s.range, s.choices, s.field(deck), deck);
      } else {
        if (s.required) fail(Exit::bad_input, path_ + ": missing required key '" + s.key + "'", true);
        auto def = toml::parse("v = " + s.def, std::string_view("<default>"));
        store(*def.get("v"), s.key, s.kind, Range{}, s.choices, s.field(deck), deck);
        deck.locations[s.key] = "default";
      }
    }

    parse_layers(*root["model"].as_table(), deck);
    if (auto c = root["cluster"].as_table()) parse_levels(*c, deck);
  }

  void parse_layers(const toml::table& model, Deck& deck) const {
    const toml::node* ln = model.get("layers");
    if (!ln) fail(Exit::bad_input, path_ + ": section [model] has no layers: add [[model.layers]] tables", true);
    auto arr = ln->as_array();
    if (arr && arr->empty()) bad(where(*ln, "model.layers"), "model.layers", "must hold at least one layer");
    if (!arr || !arr->is_array_of_tables())
      bad(where(*ln, "model.layers"), "model.layers", "must be an array of tables ([[model.layers]]), got " + node_type_name(*ln));
    std::vector<std::string> types = known_layer_types();
    std::string type_list;
    for (auto& t : types) type_list += (type_list.empty() ? "" : ", ") + t;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::table& t = *(*arr)[i].as_table();
      const std::string base = "model.layers[" + std::to_string(i) + "]";
      LayerSpec spec;
      spec.index = static_cast<int>(i);
      spec.where = where(t, "model.layers." + std::to_string(i));
      const toml::node* tn = t.get("type");
      if (!tn) bad(spec.where, base + ".type", "required: layer " + std::to_string(i) + " has no type (known: " + type_list + ")");
      const std::string tkey = "model.layers." + std::to_string(i) + ".type";
      if (!tn->as_string()) bad(where(*tn, tkey), base + ".type", "must be a string, got " + node_text(*tn) + " (" + node_type_name(*tn) + ")");
      spec.type = tn->as_string()->get();
      const LayerType* type = find_layer_type(spec.type);
      if (!type) {
        std::string dym = did_you_mean(spec.type, types);
        bad(where(*tn, tkey), base + ".type",
            "unknown layer type '" + spec.type + "'" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") +
                " (known: " + type_list + ")");
      }
      std::vector<std::string> allowed = {"type", "name"};
      for (auto& k : type->keys) allowed.push_back(k.key);
      for (auto&& [k, v] : t) {
        std::string key(k.str());
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
          std::string dym = did_you_mean(key, allowed);
          std::string list;
          for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
          bad(where(k, v, "model.layers." + std::to_string(i) + "." + key), base + "." + key,
              "unknown key for a " + spec.type + " layer" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") +
                  " (known: " + list + ")");
        }
      }
      if (auto nn = t.get("name")) {
        const std::string nkey = "model.layers." + std::to_string(i) + ".name";
        auto raw = set_raw_.find(nkey);
        if (nn->as_string()) spec.name = nn->as_string()->get();
        else if (raw != set_raw_.end() && !nn->is_array() && !nn->is_table()) spec.name = raw->second;  // --set name=7
        else bad(where(*nn, nkey), base + ".name", "must be a string, got " + node_text(*nn) + " (" + node_type_name(*nn) + ")");
      } else {
        spec.name = spec.type + std::to_string(i);
      }
      for (auto& k : type->keys) {
        const std::string full = "model.layers." + std::to_string(i) + "." + k.key;
        if (auto v = t.get(k.key)) {
          // layer keys report as model.layers[i].key
          store_layer(*v, full, base + "." + k.key, k, k.field(spec));
        } else if (k.required) {
          fail(Exit::bad_input,
               spec.where + ": key '" + base + "." + k.key + "': required for a " + spec.type + " layer (" + k.doc + ")", true);
        }
      }
      if (type->finish) type->finish(spec);
      if (type->check) {
        const auto [key, msg] = type->check(spec);
        if (!msg.empty()) {
          const toml::node* kn = key.empty() ? nullptr : t.get(key);
          bad(kn ? where(*kn, "model.layers." + std::to_string(i) + "." + key) : spec.where, base + "." + (key.empty() ? "type" : key), msg);
        }
      }
      if (type->loss && i + 1 != arr->size())
        bad(spec.where, base + ".type", spec.type + " is a loss and must be the last layer, but it is layer " +
                                            std::to_string(i) + " of " + std::to_string(arr->size()));
      deck.model.layers.push_back(spec);
    }
    const LayerSpec& last = deck.model.layers.back();
    if (!find_layer_type(last.type)->loss) {
      std::string losses;
      for (const LayerType* lt : layer_types())
        if (lt->loss) losses += (losses.empty() ? "'" : ", '") + lt->name + "'";
      bad(last.where, "model.layers[" + std::to_string(last.index) + "].type",
          "the last layer must be a loss (" + losses + "), got '" + last.type + "'");
    }
  }

  void store_layer(const toml::node& n, const std::string& lookup_key, const std::string& shown_key,
                   const LayerKey& k, void* dst) const {
    Deck scratch;
    const std::string at = where(n, lookup_key);
    // the scalar conversion, reporting the key as model.layers[i].key
    Parser p(path_, set_where_, {});
    p.set_where_[shown_key] = at;
    p.store(n, shown_key, k.kind, k.range, {}, dst, scratch);
  }

  void parse_levels(const toml::table& cluster, Deck& deck) const {
    const toml::node* ln = cluster.get("levels");
    if (!ln) return;
    auto arr = ln->as_array();
    if (!arr || !arr->is_array_of_tables())
      bad(where(*ln, "cluster.levels"), "cluster.levels", "must be an array of tables ([[cluster.levels]])");
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::table& t = *(*arr)[i].as_table();
      const std::string base = "cluster.levels[" + std::to_string(i) + "]";
      ClusterLevel lv;
      for (auto&& [k, v] : t) {
        std::string key(k.str());
        std::vector<std::string> allowed = {"ranks", "bandwidth", "latency"};
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
          std::string dym = did_you_mean(key, allowed);
          bad(where(k, v, "cluster.levels." + std::to_string(i) + "." + key), base + "." + key,
              "unknown key" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") + " (known: ranks, bandwidth, latency)");
        }
        Deck scratch;
        Parser p(path_, set_where_, set_raw_);
        p.set_where_[base + "." + key] = where(v, "cluster.levels." + std::to_string(i) + "." + key);
        if (key == "ranks") p.store(v, base + ".ranks", Kind::Int, gt(0), {}, &lv.ranks, scratch);
        if (key == "bandwidth") p.store(v, base + ".bandwidth", Kind::Float, gt(0), {}, &lv.bandwidth, scratch);
        if (key == "latency") p.store(v, base + ".latency", Kind::Float, ge(0), {}, &lv.latency, scratch);
      }
      if (!t.contains("ranks") || !t.contains("bandwidth"))
        fail(Exit::bad_input, where(t, base) + ": key '" + base + "': needs 'ranks' and 'bandwidth'", true);
      deck.cluster.levels.push_back(lv);
    }
  }

 private:
  std::string path_;
  std::map<std::string, std::string> set_where_;  // key -> "command line '--set k=v'"
  std::map<std::string, std::string> set_raw_;    // key -> the --set value text as typed
};

// The data keys of one source: files it needs and vocabulary sizes.
void check_data_consistency(const Deck& d) {
  const std::string& src = d.data.source;
  if ((src == "hdf5" || src == "tokens") && (d.data.train.empty() || d.data.test.empty()))
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"" + src + "\" needs data.train and data.test files", true);
  if (src == "tokens" && d.data.vocab == 0)
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"tokens\" needs data.vocab, the vocabulary size "
                              "(e.g. 50304 for GPT-2 tokens)", true);
  if (src == "tokens" && d.data.vocab < 2)
    fail(Exit::bad_input, d.where("data.vocab") + ": key 'data.vocab': must be at least 2 for tokens, got " +
                              std::to_string(d.data.vocab), true);
  if (src == "text" && d.data.vocab != 0 && d.data.vocab != 256)
    fail(Exit::bad_input, d.where("data.vocab") + ": key 'data.vocab': text has a fixed vocabulary of 256 (one token per byte), got " +
                              std::to_string(d.data.vocab) + "; leave data.vocab unset", true);
}

// Per-source defaults: text reads the Debian `fortunes` package unless data.path was set.
void resolve_data_defaults(Deck& d) {
  if (d.data.source != "text") return;
  d.data.vocab = kTextVocab;
  if (d.locations["data.path"] == "default") d.data.path = kFortunesPath;
}

// Cross-field rules: each message names both keys and their values.
void check_consistency(const Deck& d) {
  auto both = [&](const std::string& a, const std::string& b, const std::string& msg) {
    fail(Exit::bad_input, d.where(a) + ": key '" + a + "': " + msg + " (" + b + " set at " + d.where(b) + ")", true);
  };
  if (d.train.batch_size % d.parallel.microbatches != 0)
    both("parallel.microbatches", "train.batch_size",
         "microbatches = " + std::to_string(d.parallel.microbatches) + " does not divide train.batch_size = " +
             std::to_string(d.train.batch_size));
  const int64_t L = static_cast<int64_t>(d.model.layers.size());
  int64_t prev = 0;
  for (size_t i = 0; i < d.parallel.split.size(); ++i) {
    int64_t v = d.parallel.split[i];
    if (v <= prev || v >= L) {
      std::string why = v >= L ? "is past the last layer (the model has " + std::to_string(L) + " layers, 0.." +
                                     std::to_string(L - 1) + "; a stage must start at 1.." + std::to_string(L - 1) + ")"
                               : "leaves stage " + std::to_string(i) + " empty (split must be strictly increasing and > 0)";
      fail(Exit::bad_input, d.where("parallel.split") + ": key 'parallel.split': element " + std::to_string(i) + " = " +
                                std::to_string(v) + " " + why + "; split = " + toml_int_list(d.parallel.split),
           true);
    }
    prev = v;
  }
  // one replica count per rank group: per stage (contiguous), per 2 stages (V), per v stages (looped)
  const std::string placement =
      d.parallel.placement != "auto" ? d.parallel.placement : placement_name(schedule_def(d.parallel.schedule).placement);
  const size_t K = d.parallel.split.size() + 1, R = d.parallel.replicas.size();
  const bool groups_fit = placement_fits(placement_from_name(placement), static_cast<int>(K), static_cast<int>(R));
  if (!d.parallel.replicas.empty() && !d.parallel.split_auto && !groups_fit)
    both("parallel.replicas", "parallel.split",
         "has " + std::to_string(R) + " entries " + toml_int_list(d.parallel.replicas) + " but parallel.split " +
             toml_int_list(d.parallel.split) + " makes " + std::to_string(K) + " stages" +
             (placement == "contiguous" ? "" : ", which the " + placement + " placement cannot spread over " + std::to_string(R) +
                                                   " rank groups (V: 2 stages per group; looped: the same number per group)"));
  const ScheduleDef& sched = schedule_def(d.parallel.schedule);
  if (!d.parallel.split_auto && !sched.stage_count_problem(static_cast<int>(K)).empty())
    both("parallel.split", "parallel.schedule", sched.name + " " + sched.stages_doc + ", but split = " + toml_int_list(d.parallel.split));
  check_data_consistency(d);
  if (d.data.source == "synthetic" && d.data.shape.empty())
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"synthetic\" needs data.shape (e.g. [3, 64, 64])", true);
  if (d.data.source == "synthetic" && d.data.shape.size() != 1 && d.data.shape.size() != 3)
    fail(Exit::bad_input, d.where("data.shape") + ": key 'data.shape': must have 1 (features) or 3 (C, H, W) entries, got " +
                              toml_int_list(d.data.shape), true);
  if (d.data.source == "synthetic") {
    // The per-sample element count must be a sane size (and not overflow): at most 2^31 floats.
    double n = 1;
    for (auto v : d.data.shape) n *= static_cast<double>(v);
    if (n > 2147483648.0)
      fail(Exit::bad_input, d.where("data.shape") + ": key 'data.shape': " + toml_int_list(d.data.shape) + " is " +
                                fmt_num(n) + " values per sample; at most 2^31 = 2147483648 are supported", true);
  }
  if (d.parallel.allreduce == "nccl" && d.run.device != "cuda")
    both("parallel.allreduce", "run.device", "\"nccl\" needs run.device = \"cuda\", got \"" + d.run.device + "\"");
}

struct SetResult {
  std::map<std::string, std::string> where;  // key (and tables it created) -> "command line '--set k=v'"
  std::map<std::string, std::string> raw;    // key -> value text as typed
};

SetResult apply_sets(toml::table& root, const std::vector<std::string>& sets) {
  SetResult out;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string& s = sets[i];
    const std::string arg = "--set " + s;
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(Exit::bad_input, "command line: '" + arg + "': expected --set key=value (e.g. --set train.epochs=2)", true);
    std::string key = s.substr(0, eq), text = s.substr(eq + 1);
    // Value: TOML if it parses as one, else the bare word as a string.
    toml::table parsed;
    bool is_toml = false;
    try {
      parsed = toml::parse("v = " + text, std::string_view("--set"));
      is_toml = parsed.size() == 1 && parsed.contains("v");
    } catch (const toml::parse_error&) {
      is_toml = false;
    }
    // Walk/create the path; numeric components index arrays (model.layers.2.out).
    std::vector<std::string> parts;
    for (size_t p = 0;;) {
      size_t dot = key.find('.', p);
      parts.push_back(key.substr(p, dot == std::string::npos ? std::string::npos : dot - p));
      if (dot == std::string::npos) break;
      p = dot + 1;
    }
    for (auto& p : parts)
      if (p.empty() || p.find_first_of(" \t\"'[]") != std::string::npos)
        fail(Exit::bad_input, "command line: '" + arg + "': '" + key +
                                  "' is not a key path (dotted names such as train.lr or model.layers.1.out)", true);
    const std::string here = "command line '" + arg + "'";
    toml::node* cur = &root;
    std::string prefix;
    for (size_t j = 0; j + 1 < parts.size(); ++j) {
      prefix += (j ? "." : "") + parts[j];
      if (auto t = cur->as_table()) {
        if (!t->contains(parts[j])) {
          t->insert(parts[j], toml::table{});
          out.where.emplace(prefix, here);  // a table only this --set made: errors in it point here
        }
        cur = t->get(parts[j]);
      } else if (auto a = cur->as_array()) {
        char* end = nullptr;
        long idx = std::strtol(parts[j].c_str(), &end, 10);
        if (*end || idx < 0 || static_cast<size_t>(idx) >= a->size())
          fail(Exit::bad_input, "command line: '" + arg + "': no element '" + parts[j] + "' in the array " + prefix.substr(0, prefix.rfind('.')) +
                                    " of " + std::to_string(a->size()) + " (indices count from 0)", true);
        cur = a->get(static_cast<size_t>(idx));
      } else {
        fail(Exit::bad_input, "command line: '" + arg + "': '" + prefix + "' is not a table", true);
      }
    }
    auto t = cur->as_table();
    if (!t) fail(Exit::bad_input, "command line: '" + arg + "': '" + prefix + "' is not a table", true);
    if (is_toml) t->insert_or_assign(parts.back(), *parsed.get("v"));
    else t->insert_or_assign(parts.back(), text);
    out.where[key] = here;
    out.raw[key] = text;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------

KeyRange key_ge(double v) {
  KeyRange r;
  r.has_lo = true;
  r.lo = v;
  return r;
}
KeyRange key_gt(double v) {
  KeyRange r = key_ge(v);
  r.lo_open = true;
  return r;
}
KeyRange key_between(double lo, double hi, bool hi_open) {
  KeyRange r = key_ge(lo);
  r.has_hi = true;
  r.hi = hi;
  r.hi_open = hi_open;
  return r;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto dist = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (auto& c : candidates) {
    size_t d = dist(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

std::string Deck::where(const std::string& key) const {
  auto it = locations.find(key);
  if (it == locations.end() || it->second == "default") return path + " (default of " + key + ")";
  return it->second;
}

Deck parse_deck_text(const std::string& text, const std::string& path, const std::vector<std::string>& sets) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& e) {
    fail(Exit::bad_input,
         path + ":" + std::to_string(e.source().begin.line) + ":" + std::to_string(e.source().begin.column) +
             ": TOML syntax error: " + std::string(e.description()),
         true);
  }
  SetResult set = apply_sets(root, sets);
  Deck d;
  d.path = path;
  Parser(path, set.where, set.raw).parse(root, d);
  check_consistency(d);
  resolve_data_defaults(d);
  return d;
}

Deck load_deck(const std::string& path, const std::vector<std::string>& sets) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Exit::bad_input, path + ": cannot open deck file (" + std::string(std::strerror(errno)) + ")", true);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_deck_text(ss.str(), path, sets);
}

namespace {
std::string value_text(const KeySpec& s, Deck& d) {
  void* p = s.field(d);
  switch (s.kind) {
    case Kind::Int: return std::to_string(*static_cast<int64_t*>(p));
    case Kind::Float: return toml_float(*static_cast<double*>(p));
    case Kind::Bool: return *static_cast<bool*>(p) ? "true" : "false";
    case Kind::String:
    case Kind::Enum: return toml_string(*static_cast<std::string*>(p));
    case Kind::IntList: return toml_int_list(*static_cast<std::vector<int64_t>*>(p));
    case Kind::SplitOrAuto: {
      auto* par = static_cast<Deck::Parallel*>(p);
      return par->split_auto ? "\"auto\"" : toml_int_list(par->split);
    }
  }
  return "";
}

}  // namespace

std::vector<LayerSetting> layer_settings(const LayerSpec& l) {
  std::vector<LayerSetting> out;
  for (auto& k : layer_keys(l.type)) {
    void* p = k.field(const_cast<LayerSpec&>(l));
    LayerSetting s;
    s.key = k.key;
    switch (k.kind) {
      case Kind::Int: s.kind = 'i', s.i = *static_cast<int64_t*>(p); break;
      case Kind::Float: s.kind = 'f', s.f = *static_cast<double*>(p); break;
      case Kind::Bool: s.kind = 'b', s.i = *static_cast<bool*>(p) ? 1 : 0; break;
      default: continue;
    }
    out.push_back(s);
  }
  return out;
}

namespace {

std::string layer_text(const LayerSpec& l) {
  std::ostringstream o;
  o << "[[model.layers]]\ntype = " << toml_string(l.type) << "\nname = " << toml_string(l.name) << "\n";
  for (auto& k : layer_keys(l.type)) {
    void* p = k.field(const_cast<LayerSpec&>(l));
    o << k.key << " = ";
    switch (k.kind) {
      case Kind::Int: o << *static_cast<int64_t*>(p); break;
      case Kind::Float: o << toml_float(*static_cast<double*>(p)); break;
      case Kind::Bool: o << (*static_cast<bool*>(p) ? "true" : "false"); break;
      case Kind::String: o << toml_string(*static_cast<std::string*>(p)); break;
      default: break;
    }
    o << "\n";
  }
  return o.str();
}
}  // namespace

std::string Deck::effective_toml() const {
  Deck& d = const_cast<Deck&>(*this);
  std::ostringstream o;
  o << "# effective deck: " << path << " with --set overrides and defaults resolved\n";
  std::string section;
  for (auto& s : schema()) {
    std::string sec = s.key.substr(0, s.key.find('.'));
    if (sec != section) {
      if (section == "data") {
        o << "\n[model]\n";
        for (auto& l : model.layers) o << "\n" << layer_text(l);
      }
      section = sec;
      o << "\n[" << sec << "]\n";
    }
    o << s.key.substr(s.key.find('.') + 1) << " = " << value_text(s, d) << "\n";
  }
  for (auto& lv : cluster.levels)
    o << "\n[[cluster.levels]]\nranks = " << lv.ranks << "\nbandwidth = " << toml_float(lv.bandwidth)
      << "\nlatency = " << toml_float(lv.latency) << "\n";
  return o.str();
}

std::string Deck::model_text() const {
  std::ostringstream o;
  o << "data.source = " << data.source << "\n";
  if (data.source == "synthetic") o << "data.shape = " << toml_int_list(data.shape) << "\ndata.classes = " << data.classes << "\n";
  if (data.source == "text" || data.source == "tokens") o << "data.seq_len = " << data.seq_len << "\ndata.vocab = " << data.vocab << "\n";
  for (auto& l : model.layers) o << layer_text(l);
  return o.str();
}

uint64_t Deck::model_hash() const {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : model_text()) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<KeyDoc> deck_key_docs() {
  std::vector<KeyDoc> out;
  for (auto& s : schema()) {
    std::string range = range_text(s.range);
    if (!s.choices.empty()) {
      range.clear();
      for (auto& c : s.choices) range += (range.empty() ? "" : " \\| ") + ("`" + c + "`");
    }
    out.push_back({s.key, kind_name(s.kind), s.required ? "required" : s.def, range, s.doc});
  }
  return out;
}

std::string deck_reference_markdown() {
  std::ostringstream o;
  o << "# Deck reference\n\n"
       "Generated by `build/pipetrain keys --markdown` from the schema in `src/deck/deck.cpp`;\n"
       "`make test` fails when this file and the schema disagree.\n\n"
       "A deck is a TOML file with the sections `[run]`, `[data]`, `[model]`, `[train]`, `[parallel]`,\n"
       "`[checkpoint]` and `[cluster]`. Every key is optional except `[model]` with its `[[model.layers]]`.\n"
       "Any key can be overridden on the command line with `--set key=value` (the value is parsed as TOML;\n"
       "a bare word that is not valid TOML is taken as a string; `model.layers.N.key` reaches layer N).\n"
       "Unknown keys, wrong types, out-of-range values and inconsistent combinations are errors printed as\n"
       "`deck.toml:LINE:COL: key 'train.lr': must be > 0, got -1`, with exit code 2, before anything is written.\n";
  std::string section;
  for (auto& k : deck_key_docs()) {
    std::string sec = k.key.substr(0, k.key.find('.'));
    if (sec != section) {
      section = sec;
      o << "\n## [" << sec << "]\n\n| key | type | default | range / choices | meaning |\n|---|---|---|---|---|\n";
    }
    std::string def = k.default_value;
    o << "| `" << k.key << "` | " << k.type << " | `" << def << "` | " << k.range << " | " << k.doc << " |\n";
  }
  o << "\n### [[cluster.levels]] (planner)\n\nOne table per level of the network, innermost first, as in PipeDream's hierarchical planner.\n\n"
       "| key | type | default | range | meaning |\n|---|---|---|---|---|\n"
       "| `ranks` | integer | required | > 0 | ranks in one component of this level (e.g. 8 in a server, then 64 in a rack) |\n"
       "| `bandwidth` | float | required | > 0 | bytes/s of the links inside one component: level 0 between ranks, level 1 between the level-0 components it holds, ... |\n"
       "| `latency` | float | `0.0` | >= 0 | seconds per message |\n";
  o << "\n## [[model.layers]]\n\nThe model is a chain; layer indices count from 0 in file order. Each table has `type`,\n"
       "an optional `name`, and the keys of its type. Shapes are inferred from the data; the last layer must be\n"
       "a loss.\n\n| type | what it computes | keys |\n|---|---|---|\n";
  for (const LayerType* t : layer_types()) {
    o << "| `" << t->name << "` | " << t->doc << (t->loss ? " (a loss: the last layer)" : "") << " | ";
    std::string keys;
    for (auto& k : t->keys)
      keys += (keys.empty() ? "" : "; ") + ("`" + k.key + "` (" + kind_name(k.kind) + (k.required ? ", required" : "") +
                                            (range_text(k.range).empty() ? "" : ", " + range_text(k.range)) + "): " + k.doc);
    o << (keys.empty() ? "none" : keys) << " |\n";
  }
  return o.str();
}

}  // namespace pt
