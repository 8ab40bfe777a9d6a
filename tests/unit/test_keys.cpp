// Typed keys (keys.hpp): a key's type is its member's, so a default of another kind, or a
// member of a type no key can fill, does not compile (checked here at compile time); values
// convert to and from KeyValue per type (enums by their names, "auto", registry entries);
// a layer type's keys make its settings with every default; the optimizer and learning-rate
// registries are the deck's choices.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/keys.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/optim.hpp"

namespace pt {
namespace {

struct Sample {
  int64_t count = 0;
  double rate = 0;
  bool flag = false;
  std::string label;
  std::vector<int64_t> dims;
  Precision precision = Precision::fp32;
  std::optional<Placement> placement;
  const OptimizerDef* optimizer = nullptr;
  int narrow = 0;  // not a key type
};

// Whether key(name, member, default, doc) compiles for this member and default type.
template <class M, class D, class = void>
struct declares : std::false_type {};
template <class M, class D>
struct declares<M, D, std::void_t<decltype(key(std::string(), std::declval<M>(), std::declval<D>(), std::string()))>>
    : std::true_type {};

using Count = decltype(&Sample::count);
using Rate = decltype(&Sample::rate);
using Flag = decltype(&Sample::flag);
using Label = decltype(&Sample::label);
using Prec = decltype(&Sample::precision);
using Place = decltype(&Sample::placement);
using Opt = decltype(&Sample::optimizer);
using Narrow = decltype(&Sample::narrow);

// A default of the member's kind compiles ...
static_assert(declares<Count, int>::value && declares<Count, int64_t>::value);
static_assert(declares<Rate, double>::value && declares<Rate, int>::value);
static_assert(declares<Flag, bool>::value);
static_assert(declares<Label, const char*>::value && declares<Label, std::string>::value);
static_assert(declares<Prec, Precision>::value);
static_assert(declares<Place, std::nullopt_t>::value && declares<Place, Placement>::value);
static_assert(declares<Opt, const char*>::value);
// ... one of another kind does not: the key would convert the wrong value into its member.
static_assert(!declares<Count, double>::value && !declares<Count, bool>::value && !declares<Count, const char*>::value);
static_assert(!declares<Rate, bool>::value && !declares<Rate, const char*>::value);
static_assert(!declares<Flag, int>::value && !declares<Flag, const char*>::value);
static_assert(!declares<Label, int>::value && !declares<Label, bool>::value);
static_assert(!declares<Prec, int>::value && !declares<Prec, Placement>::value && !declares<Prec, const char*>::value);
static_assert(!declares<Place, Precision>::value && !declares<Place, bool>::value);
static_assert(!declares<Opt, int>::value);
// A member of a type no key fills (int, not int64_t) cannot be a key at all.
static_assert(!declares<Narrow, int>::value);
static_assert(KeyTraits<int64_t>::type == KeyType::integer && KeyTraits<double>::type == KeyType::floating);
static_assert(KeyTraits<Precision>::type == KeyType::choice && KeyTraits<std::optional<Placement>>::type == KeyType::choice);

TEST(Keys, ConvertEachTypeBothWays) {
  const std::vector<Key<Sample>> keys = {
      key("count", &Sample::count, 3, key_ge(0), "a count"),
      key("rate", &Sample::rate, 0.5, "a rate"),
      key("flag", &Sample::flag, true, "a flag"),
      key("label", &Sample::label, "x", "a label"),
      key("dims", &Sample::dims, std::vector<int64_t>{2, 3}, "dims"),
      key("precision", &Sample::precision, Precision::bf16, "a precision"),
      key("placement", &Sample::placement, std::nullopt, "a placement"),
      key("optimizer", &Sample::optimizer, "adamw", "an optimizer"),
  };
  Sample s;
  for (const Key<Sample>& k : keys) k.set(s, *k.info.def);
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.rate, 0.5);
  EXPECT_TRUE(s.flag);
  EXPECT_EQ(s.label, "x");
  EXPECT_EQ(s.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.precision, Precision::bf16);
  EXPECT_FALSE(s.placement.has_value());
  ASSERT_NE(s.optimizer, nullptr);
  EXPECT_EQ(s.optimizer, find_optimizer("adamw"));

  EXPECT_EQ(keys[0].info.type, KeyType::integer);
  EXPECT_EQ(keys[4].info.type, KeyType::int_list);
  EXPECT_EQ(keys[5].info.choices, (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_EQ(keys[6].info.choices, (std::vector<std::string>{"auto", "contiguous", "looped", "v"}));
  EXPECT_EQ(keys[7].info.choices, NamedRegistry<OptimizerDef>::instance().names());  // the optimizer registry

  keys[6].set(s, KeyValue(std::string("looped")));
  EXPECT_EQ(s.placement, Placement::looped);
  EXPECT_EQ(std::get<std::string>(keys[6].get(s)), "looped");
  keys[6].set(s, KeyValue(std::string("auto")));
  EXPECT_FALSE(s.placement.has_value());
  EXPECT_EQ(std::get<std::string>(keys[5].get(s)), "bf16");
  EXPECT_EQ(std::get<std::string>(keys[7].get(s)), "adamw");
}

TEST(Keys, ValueText) {
  EXPECT_EQ(key_value_text(KeyValue(int64_t{7})), "7");
  EXPECT_EQ(key_value_text(KeyValue(300.0)), "3e+02");  // the effective deck's shortest text
  EXPECT_EQ(key_value_doc(KeyValue(300.0)), "300.0");   // the docs' (as Python prints it)
  EXPECT_EQ(key_value_doc(KeyValue(1e-8)), "1e-08");
  EXPECT_EQ(key_value_doc(KeyValue(0.05)), "0.05");
  EXPECT_EQ(key_value_text(KeyValue(0.1)), "0.1");
  EXPECT_EQ(key_value_text(KeyValue(true)), "true");
  EXPECT_EQ(key_value_text(KeyValue(std::string("a\"b"))), "\"a\\\"b\"");
  EXPECT_EQ(key_value_text(KeyValue(std::vector<int64_t>{1, 2})), "[1, 2]");
  EXPECT_EQ(key_range_text(key_between(0, 1, true)), "[0, 1)");
  EXPECT_EQ(key_range_text(key_gt(0)), "> 0");
}

TEST(Keys, EnumNamesAreTheOnlyTable) {
  EXPECT_STREQ(enum_name(DataSource::fashion_mnist), "fashion-mnist");
  EXPECT_EQ(enum_from_name<DataSource>("tokens"), DataSource::tokens);
  EXPECT_FALSE(enum_from_name<DataSource>("mnist").has_value());
  EXPECT_EQ(enum_from_name<Placement>("v"), Placement::v);
  EXPECT_STREQ(precision_name(Precision::bf16), "bf16");
  EXPECT_EQ(precision_from_name("bf16"), Precision::bf16);
  EXPECT_EQ(precision_from_name("anything else"), Precision::fp32);
}

// A layer type's settings come with every default filled in, and the deck reads its keys
// (and only its keys) into them.
TEST(Keys, LayerTypesOwnTheirSettings) {
  const LayerType* conv = find_layer_type("conv2d");
  ASSERT_NE(conv, nullptr);
  std::vector<std::string> names;
  for (auto& k : conv->keys.keys) names.push_back(k.info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"channels", "kernel", "stride", "padding", "bias"}));
  EXPECT_TRUE(conv->keys.keys[0].info.required());
  LayerSpec spec;
  spec.type = "conv2d";
  spec.settings = conv->keys.make();
  EXPECT_EQ(layer_setting<int64_t>(spec, "stride"), 1);
  EXPECT_EQ(layer_setting<int64_t>(spec, "padding"), 0);
  EXPECT_TRUE(layer_setting<bool>(spec, "bias"));

  const Deck d = parse_deck_text(
      "[data]\nsource = \"synthetic\"\nshape = [2, 8, 8]\nclasses = 3\n[model]\n"
      "[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 4\n"
      "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = 3\nbias = false\n"
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
      "keys.toml", {});
  EXPECT_EQ(layer_setting<int64_t>(d.model.layers[0], "stride"), 4);  // the pooling type's own default rule
  EXPECT_TRUE(layer_settings(d.model.layers[1]).empty());
  const auto linear = layer_settings(d.model.layers[2]);
  ASSERT_EQ(linear.size(), 3u);
  EXPECT_EQ(linear[0].first, "out");
  EXPECT_EQ(std::get<int64_t>(linear[0].second), 3);
  EXPECT_FALSE(std::get<bool>(linear[1].second));
  EXPECT_EQ(linear[2].first, "tensor");
  EXPECT_EQ(std::get<std::string>(linear[2].second), "none") << "the default: whole on every tensor rank";
  EXPECT_EQ(d.model.layers[2].tie_name(), "");
}

// train.optimizer and train.lr_schedule are registry entries: the deck resolves the name once
// and lists the registries' names as the choices.
TEST(Keys, OptimizerAndScheduleComeFromRegistries) {
  // The docs' choices: every registered name, by name.
  auto choices = [](const std::vector<std::string>& names) {
    std::string c;
    for (auto& n : names) c += (c.empty() ? "`" : " \\| `") + n + "`";
    return c;
  };
  std::vector<std::string> opt, lrs;
  for (const OptimizerDef* o : optimizers()) opt.push_back(o->name);
  for (const LrScheduleDef* s : lr_schedules()) lrs.push_back(s->name);
  for (const char* name : {"sgd", "adamw"}) EXPECT_NE(std::find(opt.begin(), opt.end(), name), opt.end()) << name;
  for (const char* name : {"constant", "step", "cosine"}) EXPECT_NE(std::find(lrs.begin(), lrs.end(), name), lrs.end()) << name;
  int seen = 0;
  for (const KeyDoc& k : deck_key_docs()) {
    if (k.key == "train.optimizer") {
      EXPECT_EQ(k.range, choices(opt));
      ++seen;
    }
    if (k.key == "train.lr_schedule") {
      EXPECT_EQ(k.range, choices(lrs));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  const Deck d = parse_deck_text("[model]\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
                                 "keys.toml", {"train.optimizer=adamw", "train.lr_schedule=cosine"});
  EXPECT_EQ(d.train.optimizer, find_optimizer("adamw"));
  EXPECT_EQ(d.train.lr_schedule, find_lr_schedule("cosine"));
  const OptimConfig c = optim_config(d.train);
  EXPECT_EQ(c.optimizer->state_names(c), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(c.optimizer->momentum_key, "train.beta1");
  std::string known;
  for (auto& n : opt) known += (known.empty() ? "" : ", ") + n;
  try {
    parse_deck_text("[model]\n[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
                    "keys.toml", {"train.optimizer=adamww"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 ("command line '--set train.optimizer=adamww': key 'train.optimizer': unknown value 'adamww'; did you mean "
                  "'adamw'? (known: " + known + ")").c_str());
  }
}

}  // namespace
}  // namespace pt
