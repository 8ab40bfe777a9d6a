// Deck parsing: a table of bad decks, each with its exit code, exact location and message,
// and the good paths (the shipped decks, --set overrides, effective deck, model hash).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/schedule_ir.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

// Line numbers matter: the table below points at them.
const char* kBase =
    "[run]\n"                            // 1
    "name = \"t\"\n"                     // 2
    "seed = 3\n"                         // 3
    "\n"                                 // 4
    "[data]\n"                           // 5
    "source = \"synthetic\"\n"           // 6
    "shape = [8]\n"                      // 7
    "classes = 4\n"                      // 8
    "\n"                                 // 9
    "[model]\n"                          // 10
    "[[model.layers]]\n"                 // 11
    "type = \"linear\"\n"                // 12
    "out = 16\n"                         // 13
    "[[model.layers]]\n"                 // 14
    "type = \"relu\"\n"                  // 15
    "[[model.layers]]\n"                 // 16
    "type = \"linear\"\n"                // 17
    "out = 4\n"                          // 18
    "[[model.layers]]\n"                 // 19
    "type = \"softmax_cross_entropy\"\n" // 20
    "\n"                                 // 21
    "[train]\n"                          // 22
    "batch_size = 8\n"                   // 23
    "lr = 0.1\n"                         // 24
    "\n"                                 // 25
    "[parallel]\n"                       // 26
    "microbatches = 2\n";                // 27

// kBase with line n (1-based) replaced by `text` (which may hold several lines, or none).
std::string with_line(int n, const std::string& text) {
  std::istringstream in(kBase);
  std::string out, line;
  for (int i = 1; std::getline(in, line); ++i) out += (i == n ? text : line) + "\n";
  return out;
}

// Where the error is detected: deck parsing, or TrainSetup (model shapes, layout) with a
// world size.
enum class Stage { parse, setup };

struct BadDeck {
  const char* name;
  std::string text;
  std::vector<std::string> sets;
  std::string location;                // the message starts with this + ": "
  std::vector<std::string> fragments;  // and contains each of these
  Stage stage = Stage::parse;
  int world = 1;
};

std::vector<BadDeck> bad_decks() {
  const std::string cnn_linear =  // conv then linear, no flatten
      "[data]\nsource = \"synthetic\"\nshape = [3, 8, 8]\nclasses = 4\n"
      "[model]\n"
      "[[model.layers]]\ntype = \"conv2d\"\nchannels = 5\nkernel = 3\n"  // line 6
      "[[model.layers]]\ntype = \"linear\"\nout = 4\n"                   // line 10
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  // every registered layer type, sorted (the registry is the only list: a new type needs no edit here)
  std::string known_types = "known: ";
  for (const std::string& t : known_layer_types()) known_types += (known_types.size() > 7 ? ", " : "") + t;
  return {
      {"range", with_line(24, "lr = -1"), {}, "deck.toml:24:6", {"key 'train.lr': must be > 0, got -1"}},
      {"range_float_interval", with_line(24, "lr = 0.1\nmomentum = 1.0"), {}, "deck.toml:25:12",
       {"key 'train.momentum': must be in [0, 1), got 1.0"}},
      {"non_finite", with_line(24, "lr = inf"), {}, "deck.toml:24:6", {"key 'train.lr': must be a finite number, got inf"}},
      {"unknown_key", with_line(24, "lrr = 0.1"), {}, "deck.toml:24:1",
       {"key 'train.lrr': unknown key", "did you mean 'train.lr'?", "known keys of [train]: batch_size,"}},
      {"unknown_key_no_suggestion", with_line(3, "zzzzzzzz = 1"), {}, "deck.toml:3:1",
       {"key 'run.zzzzzzzz': unknown key (known keys of [run]: name, output_dir, seed"}},
      {"unknown_section", with_line(22, "[trian]"), {}, "deck.toml:22:2",
       {"key 'trian': unknown section; did you mean [train]?", "known sections: run, data, model"}},
      {"wrong_type_int", with_line(23, "batch_size = 8.0"), {}, "deck.toml:23:14",
       {"key 'train.batch_size': must be an integer, got 8.0 (float)"}},
      {"wrong_type_string", with_line(2, "name = 7"), {}, "deck.toml:2:8", {"key 'run.name': must be a string, got 7 (integer)"}},
      {"wrong_type_list", with_line(7, "shape = 8"), {}, "deck.toml:7:9",
       {"key 'data.shape': must be an array of integers, got 8 (integer)"}},
      {"wrong_type_section", "parallel = 3\n" + std::string(kBase).substr(0, std::string(kBase).find("[parallel]")), {},
       "deck.toml:1:12",
       {"key 'parallel': must be a table ([parallel]), got integer"}},
      {"enum", with_line(27, "schedule = \"1f1bb\""), {}, "deck.toml:27:12",
       {"key 'parallel.schedule': unknown value '1f1bb'; did you mean '1f1b'?", "known: 1f1b, 2bw, bsp, gpipe"}},
      {"unknown_layer_type", with_line(15, "type = \"rleu\""), {}, "deck.toml:15:8",
       {"key 'model.layers[1].type': unknown layer type 'rleu'; did you mean 'relu'?",
        known_types}},
      {"layer_type_not_string", with_line(15, "type = 3"), {}, "deck.toml:15:8",
       {"key 'model.layers[1].type': must be a string, got 3 (integer)"}},
      {"unknown_layer_key", with_line(13, "outs = 16"), {}, "deck.toml:13:1",
       {"key 'model.layers[0].outs': unknown key for a linear layer; did you mean 'out'?", "known: type, name, out, bias"}},
      {"missing_layer_type", with_line(15, ""), {}, "deck.toml:14:1",
       {"key 'model.layers[1].type': required", "known: attention, avgpool2d, batchnorm2d, conv2d"}},
      {"missing_required_layer_key", with_line(13, ""), {}, "deck.toml:11:1",
       {"key 'model.layers[0].out': required for a linear layer"}},
      {"layer_range", with_line(13, "out = 0"), {}, "deck.toml:13:7", {"key 'model.layers[0].out': must be > 0, got 0"}},
      {"loss_not_last", with_line(15, "type = \"softmax_cross_entropy\""), {}, "deck.toml:14:1",
       {"softmax_cross_entropy is a loss and must be the last layer, but it is layer 1 of 4"}},
      {"missing_model_section", std::string(kBase).substr(0, std::string(kBase).find("[model]")) + "[train]\nlr = 0.1\n", {},
       "deck.toml", {"missing required section [model]"}},
      {"model_without_layers", "[model]\n", {}, "deck.toml", {"section [model] has no layers"}},
      {"empty_layers", "[model]\nlayers = []\n", {}, "deck.toml:2:10", {"key 'model.layers': must hold at least one layer"}},
      {"duplicate_key", with_line(24, "lr = 0.1\nlr = 0.2"), {}, "deck.toml:25:6", {"TOML syntax error", "'lr'"}},
      {"duplicate_table", with_line(25, "[run]\nname = \"x\""), {}, "deck.toml:25:1", {"TOML syntax error", "'run'"}},
      {"syntax_unterminated_string", with_line(24, "lr = \"0.1"), {}, "deck.toml:24:10", {"TOML syntax error", "string"}},
      {"syntax_bad_header", with_line(26, "[parallel"), {}, "deck.toml:26:10", {"TOML syntax error", "table header"}},
      {"microbatches_divide", with_line(27, "microbatches = 3"), {}, "deck.toml:27:16",
       {"key 'parallel.microbatches': microbatches = 3 does not divide train.batch_size = 8",
        "(train.batch_size set at deck.toml:23:14)"}},
      {"split_past_end", with_line(27, "split = [5]"), {}, "deck.toml:27:9",
       {"key 'parallel.split': element 0 = 5 is past the last layer (the model has 4 layers", "split = [5]"}},
      {"split_not_increasing", with_line(27, "split = [2, 1]"), {}, "deck.toml:27:9",
       {"element 1 = 1 leaves stage 1 empty (split must be strictly increasing and > 0); split = [2, 1]"}},
      {"split_zero", with_line(27, "split = [0]"), {}, "deck.toml:27:9", {"element 0 must be > 0, got 0"}},
      {"replicas_vs_split", with_line(27, "split = [2]\nreplicas = [1, 1, 1]"), {}, "deck.toml:28:12",
       {"key 'parallel.replicas': has 3 entries [1, 1, 1] but parallel.split [2] makes 2 stages",
        "(parallel.split set at deck.toml:27:9)"}},
      {"recompute_unknown", with_line(27, "recompute = \"ful\""), {}, "deck.toml:27:13",
       {"key 'parallel.recompute': unknown value 'ful'; did you mean 'full'? (known: none, selective, full)"}},
      {"recompute_unknown_element", with_line(27, "split = [2]\nrecompute = [\"none\", \"selectiv\"]"), {}, "deck.toml:28:13",
       {"key 'parallel.recompute': element 1: unknown value 'selectiv'; did you mean 'selective'?"}},
      {"recompute_not_strings", with_line(27, "recompute = [1]"), {}, "deck.toml:27:13",
       {"key 'parallel.recompute': element 0 must be a string, got 1 (integer)"}},
      {"recompute_empty", with_line(27, "recompute = []"), {}, "deck.toml:27:13",
       {"key 'parallel.recompute': must name at least one value"}},
      {"recompute_vs_split", with_line(27, "split = [2]\nrecompute = [\"full\", \"none\", \"none\"]"), {}, "deck.toml:28:13",
       {"key 'parallel.recompute': has 3 entries [\"full\", \"none\", \"none\"] but parallel.split [2] makes 2 stages",
        "(parallel.split set at deck.toml:27:9)"}},
      {"recompute_list_with_auto", with_line(27, "split = \"auto\"\nrecompute = [\"full\", \"none\"]"), {}, "deck.toml:28:13",
       {"key 'parallel.recompute': has 2 entries [\"full\", \"none\"], one per stage, but parallel.split = \"auto\" chooses the stages"}},
      {"recompute_list_set", kBase, {"parallel.recompute=[\"full\",\"none\"]"},
       "command line '--set parallel.recompute=[\"full\",\"none\"]'",
       {"key 'parallel.recompute': has 2 entries [\"full\", \"none\"] but parallel.split [] makes 1 stage",
        "(parallel.split set at deck.toml (default of parallel.split))"}},
      {"bsp_with_split", with_line(27, "split = [2]\nschedule = \"bsp\""), {}, "deck.toml:27:9",
       {"key 'parallel.split'", "bsp", "(parallel.schedule set at deck.toml:28:12)"}},
      {"nccl_needs_cuda", with_line(27, "allreduce = \"nccl\""), {}, "deck.toml:27:13",
       {"key 'parallel.allreduce': \"nccl\" needs run.device = \"cuda\", got \"cpu\""}},
      {"hdf5_needs_files", with_line(6, "source = \"hdf5\""), {}, "deck.toml:6:10",
       {"key 'data.source': \"hdf5\" needs data.train and data.test"}},
      {"synthetic_shape_rank", with_line(7, "shape = [3, 8]"), {}, "deck.toml:7:9",
       {"key 'data.shape': must have 1 (features) or 3 (C, H, W) entries, got [3, 8]"}},
      {"pool_padding", cnn_linear.substr(0, cnn_linear.find("[[model.layers]]\ntype = \"linear\"")) +
                           "[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 2\npadding = 2\n"
                           "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
       {}, "deck.toml:13:11", {"key 'model.layers[1].padding': must be at most half the kernel, kernel / 2 = 1", "got 2"}},
      {"clip_grad_norm_negative", with_line(24, "lr = 0.1\nclip_grad_norm = -1"), {}, "deck.toml:25:18",
       {"key 'train.clip_grad_norm': must be >= 0, got -1"}},
      {"cluster_level_incomplete", std::string(kBase) + "[[cluster.levels]]\nranks = 2\n", {}, "deck.toml:28:1",
       {"key 'cluster.levels[0]': needs 'ranks' and 'bandwidth'"}},
      // --set: the same errors, located at the command-line argument
      {"set_unknown_key", kBase, {"train.lrr=1"}, "command line '--set train.lrr=1'",
       {"key 'train.lrr': unknown key; did you mean 'train.lr'?"}},
      {"set_unknown_section", kBase, {"trian.lr=1"}, "command line '--set trian.lr=1'",
       {"key 'trian': unknown section; did you mean [train]?"}},
      {"set_wrong_type", kBase, {"train.epochs=two"}, "command line '--set train.epochs=two'",
       {"key 'train.epochs': must be an integer, got \"two\" (string)"}},
      {"set_range", kBase, {"train.lr=-1"}, "command line '--set train.lr=-1'", {"key 'train.lr': must be > 0, got -1"}},
      {"set_layer_key", kBase, {"model.layers.0.out=0"}, "command line '--set model.layers.0.out=0'",
       {"key 'model.layers[0].out': must be > 0, got 0"}},
      {"set_layer_unknown_key", kBase, {"model.layers.1.out=3"}, "command line '--set model.layers.1.out=3'",
       {"key 'model.layers[1].out': unknown key for a relu layer"}},
      {"set_layer_index", kBase, {"model.layers.4.out=3"}, "command line: '--set model.layers.4.out=3'",
       {"no element '4' in the array model.layers of 4"}},
      {"set_inline_table", kBase, {"train={lr=-1}"}, "command line '--set train={lr=-1}'", {"key 'train.lr': must be > 0, got -1"}},
      {"set_no_equals", kBase, {"train.lr"}, "command line: '--set train.lr'", {"expected --set key=value"}},
      {"set_empty_component", kBase, {"train..lr=1"}, "command line: '--set train..lr=1'", {"is not a key path"}},
      {"set_cross_field", kBase, {"train.batch_size=6", "parallel.microbatches=4"},
       "command line '--set parallel.microbatches=4'",
       {"microbatches = 4 does not divide train.batch_size = 6", "(train.batch_size set at command line '--set train.batch_size=6')"}},
      // From pt::Model construction: both layers' shapes
      {"shape_linear_after_conv", cnn_linear, {}, "deck.toml:10:1",
       {"layer 1 'linear1' (linear): expects a flat [F] input, but layer 0 'conv2d0' outputs [5, 6, 6]", "flatten"},
       Stage::setup},
      {"shape_logits_vs_classes", with_line(18, "out = 5"), {}, "deck.toml:19:1",
       {"the loss needs [4] logits (the data has 4 classes), but layer 2 'linear2' outputs [5]"}, Stage::setup},
      {"shape_logits_via_set", kBase, {"data.classes=10"}, "deck.toml:19:1",
       {"the loss needs [10] logits (the data has 10 classes), but layer 2 'linear2' outputs [4]"}, Stage::setup},
      // From pt::Layout::from_deck with a world size
      {"ranks_vs_replicas", with_line(27, "split = [2]\nreplicas = [1, 2]"), {}, "deck.toml:28:12",
       {"key 'parallel.replicas': [1, 2] places 3 ranks (their sum), but the job has 2 (mpirun -np 2)"}, Stage::setup, 2},
      {"ranks_vs_split", with_line(27, "split = [2]"), {}, "deck.toml:27:9",
       {"key 'parallel.split': [2] makes 2 stages, but the job has 3 ranks; set parallel.replicas"}, Stage::setup, 3},
      {"ranks_vs_replicas_set", kBase, {"parallel.replicas=[3]"}, "command line '--set parallel.replicas=[3]'",
       {"[3] places 3 ranks (their sum), but the job has 2"}, Stage::setup, 2},
  };
}

void PrintTo(const BadDeck& c, std::ostream* os) { *os << c.name; }

class BadDeckTest : public ::testing::TestWithParam<BadDeck> {};

TEST_P(BadDeckTest, IsLocatedBadInput) {
  const BadDeck& c = GetParam();
  std::string what;
  bool thrown = false;
  try {
    Deck d = parse_deck_text(c.text, "deck.toml", c.sets);
    ASSERT_EQ(c.stage, Stage::setup) << "parsing succeeded, but this deck should fail to parse";
    try {
      TrainSetup::from_deck(d, c.world);
    } catch (const Error& e) {
      thrown = true;
      what = e.what();
      EXPECT_EQ(e.code(), Exit::bad_input) << what;
      EXPECT_TRUE(e.collective()) << "a deck error is the same on every rank and must be printed once: " << what;
    }
  } catch (const Error& e) {
    ASSERT_EQ(c.stage, Stage::parse) << "should parse, and fail in TrainSetup, but: " << e.what();
    thrown = true;
    what = e.what();
    EXPECT_EQ(e.code(), Exit::bad_input) << what;
    EXPECT_TRUE(e.collective()) << what;
  }
  ASSERT_TRUE(thrown) << "no error for deck " << c.name;
  EXPECT_EQ(what.rfind(c.location + ": ", 0), 0u) << "expected the message to start with '" << c.location << ": '\n  got: " << what;
  for (const auto& f : c.fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
}

INSTANTIATE_TEST_SUITE_P(Deck, BadDeckTest, ::testing::ValuesIn(bad_decks()),
                         [](const ::testing::TestParamInfo<BadDeck>& i) { return std::string(i.param.name); });

// A warm-up longer than the run: a warning naming train.warmup_steps and the key that ends
// the run (train.max_steps, or train.epochs), each with where it was set.
TEST(Deck, WarmupLongerThanTheRunWarnsNamingBothKeys) {
  const Deck d = parse_deck_text(with_line(24, "lr = 0.1\nwarmup_steps = 100\nmax_steps = 50\nlr_schedule = \"cosine\"\nmin_lr = 0.01"),
                                 "deck.toml", {});
  const std::string w = warmup_warning(d, 50);
  EXPECT_EQ(w.rfind("warning: deck.toml:25:16: key 'train.warmup_steps': 100 warm-up steps are more than the run's 50 steps "
                    "(train.max_steps = 50 set at deck.toml:26:13): the learning rate never reaches train.lr = 0.1 and ends the "
                    "run at 0.01;", 0), 0u) << w;
  EXPECT_EQ(w.back(), '\n');
  EXPECT_EQ(warmup_warning(d, 100), "");
  EXPECT_EQ(warmup_warning(parse_deck_text(kBase, "deck.toml", {}), 1), "");  // no warm-up
  const Deck e = parse_deck_text(kBase, "deck.toml", {"train.warmup_steps=30", "train.epochs=2"});
  const std::string we = warmup_warning(e, 20);
  EXPECT_NE(we.find("warning: command line '--set train.warmup_steps=30': key 'train.warmup_steps': 30 warm-up "
                                    "steps are more than the run's 20 steps (train.epochs = 2 set at command line '--set train.epochs=2')"),
            std::string::npos) << we;
}

TEST(Deck, BadDeckTableIsLarge) { EXPECT_GE(bad_decks().size(), 20u); }

TEST(Deck, MessageFormatIsExact) {
  try {
    parse_deck_text(with_line(24, "lr = -1"), "deck.toml", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "deck.toml:24:6: key 'train.lr': must be > 0, got -1");
  }
  try {
    parse_deck_text(kBase, "deck.toml", {"train.lr=-1"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "command line '--set train.lr=-1': key 'train.lr': must be > 0, got -1");
  }
}

TEST(Deck, BaseDeckIsGood) {
  Deck d = parse_deck_text(kBase, "deck.toml", {});
  EXPECT_EQ(d.model.layers.size(), 4u);
  EXPECT_EQ(d.train.batch_size, 8);
  EXPECT_DOUBLE_EQ(d.train.lr, 0.1);
  EXPECT_EQ(d.where("train.lr"), "deck.toml:24:6");
  EXPECT_EQ(d.where("train.epochs"), "deck.toml (default of train.epochs)");
  TrainSetup s = TrainSetup::from_deck(d, 1);
  EXPECT_EQ(s.model->size(), 4);
  EXPECT_EQ(s.mb_size, 4);
}

TEST(Deck, MissingDeckFileIsBadInput) {
  try {
    load_deck("/nonexistent/deck.toml", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/deck.toml: cannot open deck file"), std::string::npos) << e.what();
  }
}

TEST(Deck, ShippedDecksParse) {
  Deck mlp = load_deck("input/fashion_mlp.toml", {});
  EXPECT_EQ(mlp.data.source, DataSource::fashion_mnist);
  EXPECT_EQ(mlp.model.layers.size(), 7u);
  EXPECT_TRUE(mlp.parallel.split_auto);  // the default deck lets the planner choose
  EXPECT_EQ(mlp.parallel.microbatches, 4);
  Deck fixed = load_deck("input/fashion_mlp.toml", {"parallel.split=[3]"});
  TrainSetup ms = TrainSetup::from_deck(fixed, 2);
  EXPECT_EQ(ms.layout.stages(), 2);

  Deck cnn = load_deck("input/fashion_cnn.toml", {});
  EXPECT_EQ(cnn.model.layers.size(), 11u);
  EXPECT_EQ(cnn.model.layers[0].type, "conv2d");
  EXPECT_EQ(layer_setting<int64_t>(cnn.model.layers[0], "stride"), 1);  // default filled in
  EXPECT_EQ(layer_setting<int64_t>(cnn.model.layers[2], "stride"), 2);  // pool stride defaults to the kernel
  TrainSetup cs = TrainSetup::from_deck(cnn, 1);
  EXPECT_EQ(cs.model->size(), 11);
}

TEST(Deck, SetOverridesReadBack) {
  const std::vector<std::string> sets = {"parallel.schedule=gpipe", "parallel.split=[3,6]", "train.epochs=2",
                                         "model.layers.7.out=256", "train.lr=0.5", "run.name=2024",
                                         "data.path=/nonexistent", "run.debug_versions=true"};
  Deck d = load_deck("input/fashion_cnn.toml", sets);
  EXPECT_EQ(d.parallel.schedule, "gpipe");
  EXPECT_EQ(d.parallel.split, std::vector<int64_t>({3, 6}));
  EXPECT_FALSE(d.parallel.split_auto);
  EXPECT_EQ(d.train.epochs, 2);
  EXPECT_EQ(layer_setting<int64_t>(d.model.layers[7], "out"), 256);
  EXPECT_DOUBLE_EQ(d.train.lr, 0.5);
  EXPECT_EQ(d.run.name, "2024");  // a number typed for a string key stays as typed
  EXPECT_EQ(d.data.path, "/nonexistent");
  EXPECT_TRUE(d.run.debug_versions);
  EXPECT_EQ(d.where("train.lr"), "command line '--set train.lr=0.5'");

  // A bare word that is not TOML is a string; a quoted one is too; and back to 1f1b.
  Deck a = parse_deck_text(with_line(27, "schedule = \"gpipe\""), "deck.toml", {"parallel.schedule=1f1b", "parallel.split=auto"});
  EXPECT_EQ(a.parallel.schedule, "1f1b");
  EXPECT_TRUE(a.parallel.split_auto);
  Deck q = parse_deck_text(kBase, "deck.toml", {"parallel.split=\"auto\"", "model.layers.0.out=256", "model.layers.0.name=7"});
  EXPECT_TRUE(q.parallel.split_auto);
  EXPECT_EQ(layer_setting<int64_t>(q.model.layers[0], "out"), 256);
  EXPECT_EQ(q.model.layers[0].name, "7");
  // The last --set of a key wins; a new section can be made from the command line.
  Deck w = parse_deck_text(kBase, "deck.toml", {"train.epochs=2", "train.epochs=3", "checkpoint.every_steps=10"});
  EXPECT_EQ(w.train.epochs, 3);
  EXPECT_EQ(w.checkpoint.every_steps, 10);
  // An integer is accepted for a float key.
  Deck f = parse_deck_text(kBase, "deck.toml", {"train.lr=1"});
  EXPECT_DOUBLE_EQ(f.train.lr, 1.0);
}

// A deck touching every layer type and key kind, with awkward strings.
const char* kEverything =
    "[run]\nname = \"a \\\"quoted\\\" \\\\ name \\u00e9 \\u007f tab\\tend\"\noutput_dir = \"/tmp/x y\"\nseed = 9\n"
    "comm_timeout_s = 12.5\ndebug_versions = true\n"
    "[data]\nsource = \"synthetic\"\nshape = [3, 12, 12]\nclasses = 5\ntrain_samples = 64\ntest_samples = 16\n"
    "[model]\n"
    "[[model.layers]]\ntype = \"conv2d\"\nchannels = 4\nkernel = 3\nstride = 1\npadding = 1\nbias = false\nname = \"c1\"\n"
    "[[model.layers]]\ntype = \"gelu\"\n"
    "[[model.layers]]\ntype = \"avgpool2d\"\nkernel = 2\n"
    "[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 3\nstride = 1\npadding = 1\n"
    "[[model.layers]]\ntype = \"flatten\"\n"
    "[[model.layers]]\ntype = \"layernorm\"\neps = 1e-6\n"
    "[[model.layers]]\ntype = \"dropout\"\np = 0.25\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n"
    "[train]\nbatch_size = 12\nlr = 0.123456789012345\nweight_decay = 1e-4\noptimizer = \"adamw\"\nlr_schedule = \"cosine\"\n"
    "clip_grad_norm = 0.5\n"
    "[parallel]\nsplit = [2, 5]\nreplicas = [1, 2, 1]\nmicrobatches = 3\nschedule = \"gpipe\"\n"
    "[checkpoint]\nevery_seconds = 0.1\n"
    "[cluster]\nmemory = 1.5e10\n[[cluster.levels]]\nranks = 2\nbandwidth = 1.25e10\nlatency = 2e-6\n"
    "[[cluster.levels]]\nranks = 4\nbandwidth = 1e9\n";

TEST(Deck, EffectiveTomlRoundTrips) {
  for (const auto& [text, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {kBase, {}}, {kEverything, {}}, {kBase, {"train.lr=0.3", "parallel.split=auto", "run.name=2024"}}}) {
    Deck a = parse_deck_text(text, "deck.toml", sets);
    const std::string ea = a.effective_toml();
    Deck b = parse_deck_text(ea, "deck.toml", {});
    EXPECT_EQ(b.effective_toml(), ea);
    EXPECT_EQ(b.model_hash(), a.model_hash());
    EXPECT_EQ(b.run.name, a.run.name);
    EXPECT_EQ(b.train.lr, a.train.lr);  // bit-exact float text
    EXPECT_EQ(b.cluster.levels.size(), a.cluster.levels.size());
  }
  for (const char* path : {"input/fashion_mlp.toml", "input/fashion_cnn.toml"}) {
    Deck a = load_deck(path, {});
    Deck b = parse_deck_text(a.effective_toml(), path, {});
    EXPECT_EQ(b.effective_toml(), a.effective_toml()) << path;
  }
  Deck e = parse_deck_text(kEverything, "deck.toml", {});
  EXPECT_EQ(e.run.name, "a \"quoted\" \\ name \xc3\xa9 \x7f tab\tend");
  EXPECT_EQ(e.model.layers[0].name, "c1");
  EXPECT_FALSE(layer_setting<bool>(e.model.layers[0], "bias"));
  EXPECT_EQ(layer_setting<int64_t>(e.model.layers[3], "padding"), 1);
  EXPECT_DOUBLE_EQ(layer_setting<double>(e.model.layers[5], "eps"), 1e-6);
  EXPECT_DOUBLE_EQ(layer_setting<double>(e.model.layers[6], "p"), 0.25);
  ASSERT_EQ(e.cluster.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(e.cluster.levels[0].latency, 2e-6);
  EXPECT_DOUBLE_EQ(e.cluster.levels[1].bandwidth, 1e9);
  TrainSetup s = TrainSetup::from_deck(e, 4);
  EXPECT_EQ(s.layout.stages(), 3);
}

TEST(Deck, ModelHash) {
  const Deck base = parse_deck_text(kBase, "deck.toml", {});
  const uint64_t h = base.model_hash();
  EXPECT_EQ(parse_deck_text(kBase, "other.toml", {}).model_hash(), h);
  EXPECT_EQ(parse_deck_text(kBase, "deck.toml", {"train.lr=0.7"}).model_hash(), h);
  EXPECT_EQ(parse_deck_text(kBase, "deck.toml", {"train.epochs=5", "run.seed=4", "parallel.split=[2]"}).model_hash(), h);
  EXPECT_NE(parse_deck_text(kBase, "deck.toml", {"model.layers.0.out=17"}).model_hash(), h);
  EXPECT_NE(parse_deck_text(kBase, "deck.toml", {"model.layers.1.type=gelu"}).model_hash(), h);
  EXPECT_NE(parse_deck_text(kBase, "deck.toml", {"model.layers.0.bias=false"}).model_hash(), h);
  EXPECT_NE(parse_deck_text(kBase, "deck.toml", {"data.shape=[9]"}).model_hash(), h);
  const Deck mlp = load_deck("input/fashion_mlp.toml", {});
  EXPECT_NE(mlp.model_hash(), load_deck("input/fashion_mlp.toml", {"model.layers.1.out=256"}).model_hash());
  EXPECT_EQ(mlp.model_hash(), load_deck("input/fashion_mlp.toml", {"train.lr=0.01"}).model_hash());
}

TEST(Deck, DidYouMean) {
  EXPECT_EQ(did_you_mean("lrr", {"lr", "epochs"}), "lr");
  EXPECT_EQ(did_you_mean("batchsize", {"batch_size", "epochs"}), "batch_size");
  EXPECT_EQ(did_you_mean("completely_different", {"lr", "epochs"}), "");
}

}  // namespace
}  // namespace pt
