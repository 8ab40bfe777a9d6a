// Profiles: per-layer costs (forward/backward seconds at the microbatch size, output,
// stashed and parameter bytes) and the network model (point-to-point bandwidth/latency,
// allreduce times). Measured by `pipetrain profile`, read from JSON, or converted from the
// published PipeDream graph.txt files.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/model.hpp"

namespace pt {

struct OptimConfig;  // optim.hpp

struct LayerProfile {
  int index = 0;
  std::string name, type;
  double forward_s = 0, backward_s = 0;  // per microbatch of `microbatch` samples
  double backward_weight_s = 0;          // the weight-gradient part (W) of backward_s; I = the rest
  double output_bytes = 0;               // activation sent downstream, per microbatch
  double stash_bytes = 0;                // kept for backward per microbatch (outputs + saved extras)
  double param_bytes = 0;
  double optimizer_bytes = 0;
  // parallel.recompute = "selective" (layers that recompute selectively; -1: not measured, as
  // none): the backward with its recomputation (measured whole; the recompute's cost is
  // selective_backward_s - backward_s) and the bytes kept per microbatch
  double selective_backward_s = -1, selective_stash_bytes = -1;
  double selective_backward() const { return selective_backward_s >= 0 ? selective_backward_s : backward_s; }
  double selective_stash() const { return selective_stash_bytes >= 0 ? selective_stash_bytes : stash_bytes; }
  // of forward_s + backward_s: inside the matrix-product and convolution libraries, and
  // preparing their operands (Backend::kernel_clock; their shares of the repetitions' summed
  // time applied to the median; 0 where not measured); printed by `pipetrain profile`,
  // informational (the planner does not read them)
  double product_s = 0, convert_s = 0;
  // measured on one part of a tensor-parallel split (Profile::tensor > 1): the sums over the
  // tensor group its forward runs (as many in backward) and the bytes they sum together, per
  // microbatch; its times are the part's compute alone (the simulator adds the sums)
  int tensor_sums = 0;
  double tensor_sum_bytes = 0;
};

struct NetworkPoint {
  double bytes = 0, seconds = 0;
};

struct NetworkModel {
  bool measured = false;
  double bandwidth = 0;  // bytes/s, point-to-point (fit of the p2p points)
  double latency = 0;    // s per message
  std::vector<NetworkPoint> p2p;        // one-way time per message size
  std::vector<NetworkPoint> allreduce;  // allreduce among all ranks of the measurement, per size
  int allreduce_ranks = 0;
};

struct Profile {
  std::string source;  // "measured: ..." or "graph.txt: ..."
  std::string device;
  Precision precision = Precision::fp32;  // train.precision it was measured in (output_bytes: 2 per value in bf16)
  int64_t microbatch = 0;
  double input_bytes = 0;   // model input per microbatch
  double optimizer_s_per_byte = 0;  // optimizer step cost per parameter byte
  int tensor = 1;  // parallel.tensor it was measured at: the layers' costs are of one part
  std::vector<LayerProfile> layers;
  NetworkModel network;

  std::string to_json() const;
  static Profile from_json(const std::string& text, const std::string& path);
  static Profile load(const std::string& path);  // JSON or PipeDream graph.txt (by content)
};

// How a run updates its weights, for the profile's optimizer cost: the optimizer (null: SGD
// with momentum 0.9) and whether gradients are clipped (train.clip_grad_norm > 0).
struct UpdateRule {
  const OptimConfig* optim = nullptr;
  bool clip = false;
};
// Per-layer costs at microbatch size `mb` in precision p: warm-up excluded, median of `reps`.
// In bf16 the products run in bf16, activations are rounded as in training and an
// output computed by a layer other than a view counts 2 bytes per value on the wire.
// optimizer_s_per_byte (when not null): seconds per parameter byte of one whole update as a
// run does it (Executor::on_optimizer_step): the clip's scaling, the optimizer of `update`,
// zeroing the gradients and, in bf16, rebuilding the compute copy and its bf16 array.
std::vector<LayerProfile> measure_layers(Backend& be, const Model& model, Precision p, int64_t mb, int reps,
                                         uint64_t seed, double* optimizer_s_per_byte, const UpdateRule& update = {});
// Collective over `comm`: rank 0 measures the layers of `model` at microbatch `mb` (warm-up
// excluded, median of `reps`) and shares them; every rank takes part in the network
// measurement. Every rank returns the same profile.
struct Deck;
Profile measure_profile(const Deck& deck, const Model& model, int64_t mb, int reps, MPI_Comm comm);
// Ping-pong between ranks 0 and 1 and allreduce over `comm` for a range of sizes; every
// rank of `comm` must call it. Returns the same model on every rank.
NetworkModel measure_network(MPI_Comm comm, double timeout_s);

}  // namespace pt
