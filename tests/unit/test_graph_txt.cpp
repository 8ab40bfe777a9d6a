// PipeDream graph.txt profiles: the published VGG-16 converts as a chain of 40 layers with
// the file's totals; a branchy one (ResNet-18) is linearised in a topological order whose
// cut sizes are the tensors crossing each cut; small hand-written graphs check frontier
// sizes exactly and the errors. The published files are read from
// ../shared/data/pipedream-profiles (PT_PIPEDREAM_PROFILES overrides); tests that need them
// skip when the folder is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/profile.hpp"
#include "test_support.hpp"

namespace pt {
namespace {

#define NEED_PROFILE(name, text)                                                                               \
  std::string text;                                                                                            \
  if (!test::read_text_if(test::pipedream_profiles_dir() + "/" name, &text))                                  \
    GTEST_SKIP() << "published PipeDream profiles not found at " << test::pipedream_profiles_dir() << "/" name \
                 << " (set PT_PIPEDREAM_PROFILES to the folder holding them)";

}  // namespace

TEST(GraphTxt, Vgg16IsAChainWithTheFileTotals) {
  NEED_PROFILE("vgg16.graph.txt", text);
  const GraphTxt g = read_graph_txt(text, "vgg16.graph.txt");
  EXPECT_EQ(g.nodes.size(), 41u);
  EXPECT_EQ(g.edges.size(), 41u);
  const Linearised lin = linearise_graph(g, "vgg16.graph.txt");
  const Profile& p = lin.profile;
  EXPECT_TRUE(lin.chain);
  EXPECT_EQ(lin.inputs, 1);
  ASSERT_EQ(p.layers.size(), 40u);
  double fwd = 0, bwd = 0, params = 0;
  for (const LayerProfile& l : p.layers) fwd += l.forward_s, bwd += l.backward_s, params += l.param_bytes;
  EXPECT_NEAR(fwd, 0.233902, 1e-9);   // ms in the file, Input excluded
  EXPECT_NEAR(bwd, 0.438633, 1e-9);
  EXPECT_DOUBLE_EQ(params, 553430176.0);  // 138.36 M fp32 parameters
  EXPECT_DOUBLE_EQ(p.input_bytes, 77070336.0);  // 128 x 3 x 224 x 224 x 4
  // the chain in order: node2 (first conv) ... node41 (the classifier)
  EXPECT_EQ(p.layers.front().name, "node2");
  EXPECT_EQ(p.layers.front().type, "Conv2d");
  EXPECT_EQ(p.layers.back().name, "node41");
  EXPECT_EQ(p.layers.back().type, "Linear");
  EXPECT_DOUBLE_EQ(p.layers.front().output_bytes, 1644167168.0);  // a chain cut carries the layer's output
  // Profile::load recognises the format
  EXPECT_EQ(Profile::load(test::pipedream_profiles_dir() + "/vgg16.graph.txt").layers.size(), 40u);
}

TEST(GraphTxt, BranchyResnet18IsLinearisedByFrontiers) {
  NEED_PROFILE("resnet18.graph.txt", text);
  const GraphTxt g = read_graph_txt(text, "resnet18.graph.txt");
  const Linearised lin = linearise_graph(g, "resnet18.graph.txt");
  EXPECT_FALSE(lin.chain);
  EXPECT_EQ(lin.inputs, 1);
  EXPECT_EQ(lin.profile.layers.size(), g.nodes.size() - 1);
  std::vector<int> pos(g.nodes.size(), -1);
  for (size_t k = 0; k < lin.order.size(); ++k) pos[static_cast<size_t>(lin.order[k])] = static_cast<int>(k);
  // a topological order: every edge between layers points forward
  int skips = 0;
  for (auto [a, b] : g.edges) {
    if (g.nodes[static_cast<size_t>(a)].input) continue;
    EXPECT_LT(pos[static_cast<size_t>(a)], pos[static_cast<size_t>(b)]);
    if (pos[static_cast<size_t>(b)] > pos[static_cast<size_t>(a)] + 1) ++skips;
  }
  EXPECT_GT(skips, 0);  // residual connections jump over layers
  // every cut carries exactly the outputs of earlier nodes consumed later
  for (size_t k = 0; k + 1 < lin.order.size(); ++k) {
    std::set<int> crossing;
    for (auto [a, b] : g.edges)
      if (!g.nodes[static_cast<size_t>(a)].input && pos[static_cast<size_t>(a)] <= static_cast<int>(k) &&
          pos[static_cast<size_t>(b)] > static_cast<int>(k))
        crossing.insert(a);
    double bytes = 0;
    for (int a : crossing) bytes += g.nodes[static_cast<size_t>(a)].activation_bytes;
    EXPECT_DOUBLE_EQ(lin.profile.layers[k].output_bytes, bytes) << "cut after layer " << k;
  }
  double params = 0;
  for (const LayerProfile& l : lin.profile.layers) params += l.param_bytes;
  EXPECT_DOUBLE_EQ(params, 46758048.0);
}

TEST(GraphTxt, DiamondFrontiersAndLists) {
  // a -> b, a -> c, b -> d, c -> d; c has two outputs given as a list
  const std::string text =
      "node1 -- Input -- forward_compute_time=5.0, backward_compute_time=0.0, activation_size=100.0, parameter_size=0.0\n"
      "node2 -- Conv2d(3, 8) -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=1000.0, parameter_size=40.0\n"
      "node4 -- ReLU -- forward_compute_time=0.5, backward_compute_time=0.5, activation_size=[300.0; 200.0], parameter_size=0.0\n"
      "node3 -- Linear(in=8, out=8) -- forward_compute_time=2.0, backward_compute_time=3.0, activation_size=700.0, parameter_size=80.0\n"
      "node5 -- Add -- forward_compute_time=0.1, backward_compute_time=0.1, activation_size=50.0, parameter_size=0.0\n"
      "\tnode1 -- node2\n\tnode2 -- node3\n\tnode2 -- node4\n\tnode3 -- node5\n\tnode4 -- node5\n";
  const GraphTxt g = read_graph_txt(text, "diamond");
  ASSERT_EQ(g.nodes.size(), 5u);
  EXPECT_DOUBLE_EQ(g.nodes[2].activation_bytes, 500.0);
  const Linearised lin = linearise_graph(g, "diamond");
  const Profile& p = lin.profile;
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_FALSE(lin.chain);
  EXPECT_DOUBLE_EQ(p.input_bytes, 100.0);
  EXPECT_EQ(p.layers[0].name, "node2");
  EXPECT_DOUBLE_EQ(p.layers[0].output_bytes, 1000.0);  // {node2}
  // next: node4 (frontier 1000 + 500 - 0) before node3 (1000 + 700): the smaller frontier
  EXPECT_EQ(p.layers[1].name, "node4");
  EXPECT_DOUBLE_EQ(p.layers[1].output_bytes, 1500.0);  // {node2, node4}
  EXPECT_EQ(p.layers[2].name, "node3");
  EXPECT_DOUBLE_EQ(p.layers[2].output_bytes, 1200.0);  // node2 consumed: {node4, node3}
  EXPECT_EQ(p.layers[3].name, "node5");
  EXPECT_DOUBLE_EQ(p.layers[3].output_bytes, 50.0);    // the model output
  EXPECT_DOUBLE_EQ(p.layers[1].stash_bytes, 500.0);
  EXPECT_DOUBLE_EQ(p.layers[2].forward_s, 2e-3);
  EXPECT_EQ(p.layers[2].type, "Linear");
}

TEST(GraphTxt, RejectsMalformedGraphs) {
  auto bad = [](const std::string& text, const std::string& want) {
    try {
      linearise_graph(read_graph_txt(text, "g.txt"), "g.txt");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  const std::string n1 = "node1 -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n";
  const std::string n2 = "node2 -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n";
  bad("node1 -- A -- forward_compute_time=1\n", "g.txt:1: graph.txt: node has no backward_compute_time");
  bad(n1 + "\tnode1 -- node9\n", "g.txt:2: graph.txt: edge to unknown node 'node9'");
  bad(n1 + n2 + "\tnode1 -- node2\n\tnode2 -- node1\n", "cycle");
  bad(n1 + n1, "defined twice");
  bad("garbage\n", "g.txt:1");
  bad("", "no nodes");
}

}  // namespace pt
