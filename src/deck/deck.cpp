// Deck parsing and validation: the TOML tree against the keys (the sections', schema.cpp;
// each layer type's, layers.hpp), --set overrides, located error messages with did-you-mean,
// the checks across keys, and the effective deck, model text and model hash.
#include "pipetrain/deck.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "key_text.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "schema.hpp"

namespace pt {
namespace {

using namespace deck_text;

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

// ---------------------------------------------------------------------------
// The parser: walks the TOML tree against the keys.

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

  // One value of key `key` (as messages name it) found at `at`, converted to the key's type
  // and checked against its range or choices. `raw`: the --set text of a string key (a value
  // that parsed as another TOML scalar is kept as typed), or null.
  KeyValue value(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k,
                 const std::string* raw) const {
    switch (k.type) {
      case KeyType::integer: return integer(n, key, at, k);
      case KeyType::floating: return floating(n, key, at, k);
      case KeyType::boolean: {
        auto b = n.as_boolean();
        if (!b) wrong_type(n, key, at, k);
        return KeyValue(b->get());
      }
      case KeyType::string:
      case KeyType::choice: return text(n, key, at, k, raw);
      case KeyType::int_list: return KeyValue(int_list(n, key, at, k.range));
      case KeyType::int_list_or_auto: return int_list_or_auto(n, key, at, k.range);
      case KeyType::choice_per_stage: return choice_per_stage(n, key, at, k, raw);
    }
    PT_CHECK(false, "key " << key << ": no conversion for its type");
    return {};
  }

  [[noreturn]] void wrong_type(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k) const {
    bad(at, key, "must be " + std::string(k.type == KeyType::integer ? "an " : "a ") + key_type_name(k.type) + ", got " +
                     node_text(n) + " (" + node_type_name(n) + ")");
  }

  KeyValue integer(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k) const {
    auto v = n.as_integer();
    if (!v) wrong_type(n, key, at, k);
    if (!in_range(k.range, static_cast<double>(v->get())))
      bad(at, key, range_message(k.range) + ", got " + std::to_string(v->get()));
    return KeyValue(std::in_place_type<int64_t>, v->get());
  }

  KeyValue floating(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k) const {
    double x = 0;
    if (auto f = n.as_floating_point()) x = f->get();
    else if (auto i = n.as_integer()) x = static_cast<double>(i->get());
    else wrong_type(n, key, at, k);
    if (!std::isfinite(x)) bad(at, key, "must be a finite number, got " + node_text(n));
    if (!in_range(k.range, x)) bad(at, key, range_message(k.range) + ", got " + node_text(n));
    return KeyValue(x);
  }

  KeyValue text(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k,
                const std::string* raw) const {
    // A --set value that parsed as another TOML scalar (run.name=2024) is kept as typed.
    const bool from_set = raw && !n.is_array() && !n.is_table();
    auto s = n.as_string();
    if (!s && !from_set) wrong_type(n, key, at, k);
    const std::string v = s ? std::string(s->get()) : *raw;
    if (k.type != KeyType::string) check_choice(v, key, at, k, "");
    return KeyValue(v);
  }

  // v must be one of the key's choices (`element`: which array element, for the message).
  void check_choice(const std::string& v, const std::string& key, const std::string& at, const KeyInfo& k,
                    const std::string& element) const {
    if (std::find(k.choices.begin(), k.choices.end(), v) != k.choices.end()) return;
    std::string known;
    for (auto& c : k.choices) known += (known.empty() ? "" : ", ") + c;
    std::string dym = did_you_mean(v, k.choices);
    bad(at, key, element + "unknown value '" + v + "'" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") + " (known: " + known + ")");
  }

  // One choice (every stage) or a non-empty array of choices (one per stage).
  KeyValue choice_per_stage(const toml::node& n, const std::string& key, const std::string& at, const KeyInfo& k,
                            const std::string* raw) const {
    auto a = n.as_array();
    if (!a) return text(n, key, at, k, raw);
    if (a->empty()) bad(at, key, "must name at least one value (one for every stage, or one per stage), got []");
    std::vector<std::string> out;
    for (size_t i = 0; i < a->size(); ++i) {
      auto s = (*a)[i].as_string();
      if (!s)
        bad(at, key, "element " + std::to_string(i) + " must be a string, got " + node_text((*a)[i]) + " (" +
                         node_type_name((*a)[i]) + ")");
      check_choice(s->get(), key, at, k, "element " + std::to_string(i) + ": ");
      out.emplace_back(s->get());
    }
    return KeyValue(out);
  }

  KeyValue int_list_or_auto(const toml::node& n, const std::string& key, const std::string& at, const KeyRange& range) const {
    if (auto s = n.as_string()) {
      if (s->get() != "auto") bad(at, key, "must be an array of layer indices or \"auto\", got " + node_text(n));
      return KeyValue(std::string("auto"));
    }
    return KeyValue(int_list(n, key, at, range));
  }

  std::vector<int64_t> int_list(const toml::node& n, const std::string& key, const std::string& at,
                                const KeyRange& range) const {
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
    check_sections(root);
    if (!root.contains("model"))
      fail(Exit::bad_input, path_ + ": missing required section [model] (with [[model.layers]] entries)", true);
    check_section_keys(root);
    read_section_keys(root, deck);
    parse_layers(*root["model"].as_table(), deck);
    if (auto c = root["cluster"].as_table()) parse_levels(*c, deck);
  }

  // Top level: only known sections, each a table.
  void check_sections(const toml::table& root) const {
    const std::vector<std::string>& sections = deck_sections();
    for (auto&& [k, v] : root) {
      std::string key(k.str());
      if (std::find(sections.begin(), sections.end(), key) == sections.end()) {
        std::string dym = did_you_mean(key, sections);
        bad(where(k, v, key), key,
            "unknown section" + (dym.empty() ? std::string() : "; did you mean [" + dym + "]?") +
                " (known sections: run, data, model, train, parallel, checkpoint, cluster)");
      }
      if (!v.is_table()) bad(where(v, key), key, "must be a table ([" + key + "]), got " + node_type_name(v));
    }
  }

  // Known keys per section, for unknown-key checks and suggestions.
  void check_section_keys(const toml::table& root) const {
    std::map<std::string, std::vector<std::string>> known;
    for (const Key<Deck>& s : deck_schema()) {
      auto dot = s.info.name.find('.');
      known[s.info.name.substr(0, dot)].push_back(s.info.name.substr(dot + 1));
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
  }

  // Every section key: its value where the deck (or a --set) has one, else its default.
  void read_section_keys(const toml::table& root, Deck& deck) const {
    for (const Key<Deck>& s : deck_schema()) {
      const std::string& key = s.info.name;
      const auto dot = key.find('.');
      const toml::table* section = root[key.substr(0, dot)].as_table();
      const toml::node* n = section ? section->get(key.substr(dot + 1)) : nullptr;  // a direct child only
      if (n) {
        const std::string at = where(*n, key);
        deck.locations[key] = at;
        auto raw = set_raw_.find(key);
        s.set(deck, value(*n, key, at, s.info, raw == set_raw_.end() ? nullptr : &raw->second));
      } else {
        if (s.info.required()) fail(Exit::bad_input, path_ + ": missing required key '" + key + "'", true);
        s.set(deck, *s.info.def);
        deck.locations[key] = "default";
      }
    }
  }

  void parse_layers(const toml::table& model, Deck& deck) const {
    const toml::node* ln = model.get("layers");
    if (!ln) fail(Exit::bad_input, path_ + ": section [model] has no layers: add [[model.layers]] tables", true);
    auto arr = ln->as_array();
    if (arr && arr->empty()) bad(where(*ln, "model.layers"), "model.layers", "must hold at least one layer");
    if (!arr || !arr->is_array_of_tables())
      bad(where(*ln, "model.layers"), "model.layers", "must be an array of tables ([[model.layers]]), got " + node_type_name(*ln));
    for (size_t i = 0; i < arr->size(); ++i) deck.model.layers.push_back(parse_layer(*(*arr)[i].as_table(), i, arr->size()));
    const LayerSpec& last = deck.model.layers.back();
    if (!find_layer_type(last.type)->loss) {
      std::string losses;
      for (const LayerType* lt : layer_types())
        if (lt->loss) losses += (losses.empty() ? "'" : ", '") + lt->name + "'";
      bad(last.where, "model.layers[" + std::to_string(last.index) + "].type",
          "the last layer must be a loss (" + losses + "), got '" + last.type + "'");
    }
  }

  // Layer i of `count`: its type, name and the keys of its type (messages name them
  // model.layers[i].key; --set reaches them as model.layers.i.key).
  LayerSpec parse_layer(const toml::table& t, size_t i, size_t count) const {
    const std::string base = "model.layers[" + std::to_string(i) + "]", path = "model.layers." + std::to_string(i);
    LayerSpec spec;
    spec.index = static_cast<int>(i);
    spec.where = where(t, path);
    const LayerType& type = layer_type(t, base, path, spec);
    check_layer_keys(t, type, base, path, spec);
    spec.name = layer_name(t, base, path, spec);
    spec.settings = read_layer_settings(t, type, base, path, spec);
    if (type.loss && i + 1 != count)
      bad(spec.where, base + ".type", spec.type + " is a loss and must be the last layer, but it is layer " +
                                          std::to_string(i) + " of " + std::to_string(count));
    return spec;
  }

  // The registered type the table's `type` names (into spec.type).
  const LayerType& layer_type(const toml::table& t, const std::string& base, const std::string& path, LayerSpec& spec) const {
    const std::vector<std::string> types = known_layer_types();
    std::string type_list;
    for (auto& ty : types) type_list += (type_list.empty() ? "" : ", ") + ty;
    const toml::node* tn = t.get("type");
    if (!tn) bad(spec.where, base + ".type", "required: layer " + std::to_string(spec.index) + " has no type (known: " + type_list + ")");
    const std::string tkey = path + ".type";
    if (!tn->as_string()) bad(where(*tn, tkey), base + ".type", "must be a string, got " + node_text(*tn) + " (" + node_type_name(*tn) + ")");
    spec.type = tn->as_string()->get();
    const LayerType* type = find_layer_type(spec.type);
    if (!type) {
      std::string dym = did_you_mean(spec.type, types);
      bad(where(*tn, tkey), base + ".type",
          "unknown layer type '" + spec.type + "'" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") + " (known: " + type_list + ")");
    }
    return *type;
  }

  void check_layer_keys(const toml::table& t, const LayerType& type, const std::string& base, const std::string& path,
                        const LayerSpec& spec) const {
    std::vector<std::string> allowed = {"type", "name"};
    for (const Key<LayerSettings>& k : type.keys.keys) allowed.push_back(k.info.name);
    for (auto&& [k, v] : t) {
      std::string key(k.str());
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string dym = did_you_mean(key, allowed);
      std::string list;
      for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      bad(where(k, v, path + "." + key), base + "." + key,
          "unknown key for a " + spec.type + " layer" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") + " (known: " + list + ")");
    }
  }

  std::string layer_name(const toml::table& t, const std::string& base, const std::string& path, const LayerSpec& spec) const {
    const toml::node* nn = t.get("name");
    if (!nn) return spec.type + std::to_string(spec.index);
    const std::string nkey = path + ".name";
    auto raw = set_raw_.find(nkey);
    if (nn->as_string()) return nn->as_string()->get();
    if (raw != set_raw_.end() && !nn->is_array() && !nn->is_table()) return raw->second;  // --set name=7
    bad(where(*nn, nkey), base + ".name", "must be a string, got " + node_text(*nn) + " (" + node_type_name(*nn) + ")");
  }

  // The type's settings: defaults, then each key the table sets, then the type's finish and check.
  std::shared_ptr<const LayerSettings> read_layer_settings(const toml::table& t, const LayerType& type, const std::string& base,
                                                           const std::string& path, const LayerSpec& spec) const {
    std::shared_ptr<LayerSettings> s = type.keys.make();
    for (const Key<LayerSettings>& k : type.keys.keys) {
      const std::string& name = k.info.name;
      if (auto v = t.get(name)) {
        k.set(*s, value(*v, base + "." + name, where(*v, path + "." + name), k.info, nullptr));
      } else if (k.info.required()) {
        fail(Exit::bad_input, spec.where + ": key '" + base + "." + name + "': required for a " + spec.type + " layer (" + k.info.doc + ")",
             true);
      }
    }
    s->finish();
    const auto [key, msg] = s->check();
    if (!msg.empty()) {
      const toml::node* kn = key.empty() ? nullptr : t.get(key);
      bad(kn ? where(*kn, path + "." + key) : spec.where, base + "." + (key.empty() ? "type" : key), msg);
    }
    return s;
  }

  void parse_levels(const toml::table& cluster, Deck& deck) const {
    const toml::node* ln = cluster.get("levels");
    if (!ln) return;
    auto arr = ln->as_array();
    if (!arr || !arr->is_array_of_tables())
      bad(where(*ln, "cluster.levels"), "cluster.levels", "must be an array of tables ([[cluster.levels]])");
    for (size_t i = 0; i < arr->size(); ++i) deck.cluster.levels.push_back(parse_level(*(*arr)[i].as_table(), i));
  }

  ClusterLevel parse_level(const toml::table& t, size_t i) const {
    const std::vector<Key<ClusterLevel>>& keys = cluster_level_keys();
    const std::string base = "cluster.levels[" + std::to_string(i) + "]", path = "cluster.levels." + std::to_string(i);
    std::vector<std::string> names;
    std::string known, needs;
    ClusterLevel lv;
    for (const Key<ClusterLevel>& k : keys) {
      names.push_back(k.info.name);
      known += (known.empty() ? "" : ", ") + k.info.name;
      if (k.info.required()) needs += (needs.empty() ? "'" : " and '") + k.info.name + "'";
      else k.set(lv, *k.info.def);
    }
    for (auto&& [k, v] : t) {
      std::string key(k.str());
      auto it = std::find(names.begin(), names.end(), key);
      if (it == names.end()) {
        std::string dym = did_you_mean(key, names);
        bad(where(k, v, path + "." + key), base + "." + key,
            "unknown key" + (dym.empty() ? "" : "; did you mean '" + dym + "'?") + " (known: " + known + ")");
      }
      const Key<ClusterLevel>& lk = keys[static_cast<size_t>(it - names.begin())];
      lk.set(lv, value(v, base + "." + key, where(v, path + "." + key), lk.info, nullptr));
    }
    for (const Key<ClusterLevel>& k : keys)
      if (k.info.required() && !t.contains(k.info.name))
        fail(Exit::bad_input, where(t, base) + ": key '" + base + "': needs " + needs, true);
    return lv;
  }

 private:
  std::string path_;
  std::map<std::string, std::string> set_where_;  // key -> "command line '--set k=v'"
  std::map<std::string, std::string> set_raw_;    // key -> the --set value text as typed
};

// The data keys of one source: files it needs and vocabulary sizes.
void check_data_consistency(const Deck& d) {
  const DataSource src = d.data.source;
  if ((src == DataSource::hdf5 || src == DataSource::tokens) && (d.data.train.empty() || d.data.test.empty()))
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"" + enum_name(src) +
                              "\" needs data.train and data.test files", true);
  if (src == DataSource::tokens && d.data.vocab == 0)
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"tokens\" needs data.vocab, the vocabulary size "
                              "(e.g. 50304 for GPT-2 tokens)", true);
  if (src == DataSource::tokens && d.data.vocab < 2)
    fail(Exit::bad_input, d.where("data.vocab") + ": key 'data.vocab': must be at least 2 for tokens, got " +
                              std::to_string(d.data.vocab), true);
  if (src == DataSource::text && d.data.vocab != 0 && d.data.vocab != 256)
    fail(Exit::bad_input, d.where("data.vocab") + ": key 'data.vocab': text has a fixed vocabulary of 256 (one token per byte), got " +
                              std::to_string(d.data.vocab) + "; leave data.vocab unset", true);
}

// Per-source defaults: text reads the Debian `fortunes` package unless data.path was set.
void resolve_data_defaults(Deck& d) {
  if (d.data.source != DataSource::text) return;
  d.data.vocab = kTextVocab;
  if (d.locations["data.path"] == "default") d.data.path = kFortunesPath;
}

// parallel.recompute: one value, or one per stage of parallel.split (not with "auto": the
// stage count is not known until the planner ran).
void check_recompute(const Deck& d, size_t K) {
  const PerStage<Recompute>& r = d.parallel.recompute;
  if (r.uniform()) return;
  const std::string list = key_value_text(KeyTraits<PerStage<Recompute>>::to_value(r));
  const std::string at = d.where("parallel.recompute") + ": key 'parallel.recompute': ";
  const std::string split_at = " (parallel.split set at " + d.where("parallel.split") + ")";
  if (d.parallel.split_auto)
    fail(Exit::bad_input, at + "has " + std::to_string(r.values.size()) + " entries " + list +
                              ", one per stage, but parallel.split = \"auto\" chooses the stages; give one value for every stage" +
                              split_at, true);
  if (r.values.size() != K)
    fail(Exit::bad_input, at + "has " + std::to_string(r.values.size()) + " entries " + list + " but parallel.split " +
                              toml_int_list(d.parallel.split) + " makes " + std::to_string(K) + (K == 1 ? " stage" : " stages") + "; give one value for every "
                              "stage or one per stage" + split_at, true);
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
  const Placement placement = d.parallel.placement.value_or(schedule_def(d.parallel.schedule).placement);
  const size_t K = d.parallel.split.size() + 1, R = d.parallel.replicas.size();
  const bool groups_fit = placement_fits(placement, static_cast<int>(K), static_cast<int>(R));
  if (!d.parallel.replicas.empty() && !d.parallel.split_auto && !groups_fit)
    both("parallel.replicas", "parallel.split",
         "has " + std::to_string(R) + " entries " + toml_int_list(d.parallel.replicas) + " but parallel.split " +
             toml_int_list(d.parallel.split) + " makes " + std::to_string(K) + " stages" +
             (placement == Placement::contiguous ? ""
                                                 : ", which the " + std::string(placement_name(placement)) + " placement cannot spread over " + std::to_string(R) +
                                                   " rank groups (V: 2 stages per group; looped: the same number per group)"));
  const ScheduleDef& sched = schedule_def(d.parallel.schedule);
  check_recompute(d, K);
  if (!d.parallel.split_auto && !sched.stage_count_problem(static_cast<int>(K)).empty())
    both("parallel.split", "parallel.schedule", sched.name + " " + sched.stages_doc + ", but split = " + toml_int_list(d.parallel.split));
  check_data_consistency(d);
  if (d.data.source == DataSource::synthetic && d.data.shape.empty())
    fail(Exit::bad_input, d.where("data.source") + ": key 'data.source': \"synthetic\" needs data.shape (e.g. [3, 64, 64])", true);
  if (d.data.source == DataSource::synthetic && d.data.shape.size() != 1 && d.data.shape.size() != 3)
    fail(Exit::bad_input, d.where("data.shape") + ": key 'data.shape': must have 1 (features) or 3 (C, H, W) entries, got " +
                              toml_int_list(d.data.shape), true);
  if (d.data.source == DataSource::synthetic) {
    // The per-sample element count must be a sane size (and not overflow): at most 2^31 floats.
    double n = 1;
    for (auto v : d.data.shape) n *= static_cast<double>(v);
    if (n > 2147483648.0)
      fail(Exit::bad_input, d.where("data.shape") + ": key 'data.shape': " + toml_int_list(d.data.shape) + " is " +
                                fmt_num(n) + " values per sample; at most 2^31 = 2147483648 are supported", true);
  }
  if (d.parallel.allreduce == Allreduce::nccl && d.run.device != Device::cuda)
    both("parallel.allreduce", "run.device", "\"nccl\" needs run.device = \"cuda\", got \"" + std::string(enum_name(d.run.device)) + "\"");
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

std::string warmup_warning(const Deck& d, int64_t total_steps) {
  const Deck::Train& t = d.train;
  if (t.warmup_steps <= total_steps) return "";
  const bool by_max = t.max_steps > 0 && t.max_steps <= total_steps;
  const std::string limit = by_max ? "train.max_steps = " + std::to_string(t.max_steps) + " set at " + d.where("train.max_steps")
                                   : "train.epochs = " + std::to_string(t.epochs) + " set at " + d.where("train.epochs");
  const OptimConfig c = optim_config(t);
  char last[32];
  std::snprintf(last, sizeof last, "%.4g", learning_rate(c, total_steps - 1, total_steps));
  std::ostringstream o;
  o << "warning: " << d.where("train.warmup_steps") << ": key 'train.warmup_steps': " << t.warmup_steps
    << " warm-up steps are more than the run's " << total_steps << " steps (" << limit
    << "): the learning rate never reaches train.lr = " << deck_text::fmt_num(t.lr) << " and ends the run at "
    << last << "; lower train.warmup_steps or train more steps\n";
  return o.str();
}

// ---------------------------------------------------------------------------

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

std::string layer_text(const LayerSpec& l) {
  std::ostringstream o;
  o << "[[model.layers]]\ntype = " << toml_string(l.type) << "\nname = " << toml_string(l.name) << "\n";
  for (const auto& [key, v] : layer_settings(l)) o << key << " = " << key_value_text(v) << "\n";
  return o.str();
}

}  // namespace

std::string Deck::effective_toml() const {
  std::ostringstream o;
  o << "# effective deck: " << path << " with --set overrides and defaults resolved\n";
  std::string section;
  for (const Key<Deck>& s : deck_schema()) {
    const std::string& key = s.info.name;
    std::string sec = key.substr(0, key.find('.'));
    if (sec != section) {
      if (section == "data") {
        o << "\n[model]\n";
        for (auto& l : model.layers) o << "\n" << layer_text(l);
      }
      section = sec;
      o << "\n[" << sec << "]\n";
    }
    o << key.substr(key.find('.') + 1) << " = " << key_value_text(s.get(*this)) << "\n";
  }
  for (auto& lv : cluster.levels) {
    o << "\n[[cluster.levels]]\n";
    for (const Key<ClusterLevel>& k : cluster_level_keys()) o << k.info.name << " = " << key_value_text(k.get(lv)) << "\n";
  }
  return o.str();
}

std::string Deck::model_text() const {
  std::ostringstream o;
  o << "data.source = " << enum_name(data.source) << "\n";
  if (data.source == DataSource::synthetic)
    o << "data.shape = " << toml_int_list(data.shape) << "\ndata.classes = " << data.classes << "\n";
  if (data.source == DataSource::text || data.source == DataSource::tokens)
    o << "data.seq_len = " << data.seq_len << "\ndata.vocab = " << data.vocab << "\n";
  for (auto& l : model.layers) o << layer_text(l);
  return o.str();
}

uint64_t Deck::model_hash() const {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : model_text()) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace pt
