// `pipetrain profile`: measure per-layer costs (rank 0) and, under mpirun, the network; print
// each layer's achieved GFLOP/s beside the backend's measured 1024^3 matmul peak.
#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/train.hpp"

namespace pt {

namespace {

std::unique_ptr<Backend> profile_backend(const Deck& deck) {
  return deck.run.device == Device::cuda ? make_cuda_backend(0) : make_host_backend();
}

// The precision the layers are profiled in: the deck's train.precision.
Precision profile_precision(const Deck& deck) { return deck.train.precision; }

// Per layer: achieved GFLOP/s of its forward and backward (its FLOPs over the measured
// seconds) and the better of the two as a fraction of the matmul peak; the shares of its
// forward + backward time inside the GEMM/convolution libraries and converting their operands
// (bf16 rounding, layout reorders), "-" where the backend does not measure them; then the peaks.
void print_achieved(const Deck& deck, const Model& model, const Profile& p, int64_t mb) {
  std::unique_ptr<Backend> be = profile_backend(deck);
  const Precision prec = profile_precision(deck);
  const double peak = matmul_peak_gflops(*be, prec);
  const double other = matmul_peak_gflops(*be, prec == Precision::fp32 ? Precision::bf16 : Precision::fp32);
  std::printf("%5s  %-24s %12s %12s %10s %10s %10s\n", "index", "layer", "fwd GFLOP/s", "bwd GFLOP/s", "of peak",
              "products", "operands");
  const bool clocked = p.layers.end() != std::find_if(p.layers.begin(), p.layers.end(), [](const LayerProfile& l) {
                         return l.product_s + l.convert_s > 0;
                       });
  for (const auto& l : p.layers) {
    const Layer& layer = model.layer(l.index);
    const double f = achieved_gflops(layer.flops_forward() * static_cast<double>(mb), l.forward_s);
    const double b = achieved_gflops(layer.flops_backward() * static_cast<double>(mb), l.backward_s);
    const double total = l.forward_s + l.backward_s;
    std::printf("%5d  %-24s %12.1f %12.1f %9.0f%% ", l.index, (l.name + " (" + l.type + ")").substr(0, 24).c_str(), f,
                b, peak > 0 ? 100.0 * std::max(f, b) / peak : 0.0);
    if (clocked && total > 0) std::printf("%9.0f%% %9.0f%%\n", 100.0 * l.product_s / total, 100.0 * l.convert_s / total);
    else std::printf("%10s %10s\n", "-", "-");
  }
  std::printf("matmul peak of this backend at 1024^3 (measured now, median of 5): %s %.1f GFLOP/s (the layers' "
              "precision), %s %.1f GFLOP/s\n",
              precision_name(prec), peak, precision_name(prec == Precision::fp32 ? Precision::bf16 : Precision::fp32),
              other);
}

}  // namespace

Profile measure_profile(const Deck& deck, const Model& model, int64_t mb, int reps, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Profile p;
  std::unique_ptr<Backend> be = profile_backend(deck);
  p.device = be->describe();
  p.precision = deck.train.precision;
  p.microbatch = mb;
  p.input_bytes = static_cast<double>(mb * model.input_shape().numel() * 4);
  p.source = "measured by pipetrain profile " + deck.path;
  const OptimConfig optim = optim_config(deck.train);
  const UpdateRule update{&optim, deck.train.clip_grad_norm > 0};
  if (rank == 0)
    p.layers = measure_layers(*be, model, profile_precision(deck), mb, reps, static_cast<uint64_t>(deck.run.seed), &p.optimizer_s_per_byte, update);
  // share rank 0's layer costs so every rank plans from the same numbers
  p = Profile::from_json(broadcast_string(rank == 0 ? p.to_json() : std::string(), 0, comm), "profile broadcast");
  p.tensor = model.shard().parts;
  p.network = measure_network(comm, deck.run.comm_timeout_s);
  for (auto& l : p.layers) l.optimizer_bytes = l.param_bytes * static_cast<double>(deck.train.optimizer->state_names(optim_config(deck.train)).size());
  return p;
}

int cmd_profile(const ProfileArgs& a) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Deck deck = load_deck(a.deck, a.sets);
  const DataInfo info = data_info(deck);
  // the whole chain, whatever the deck's split; under parallel.tensor = t part 0 of each split layer
  const Model model(deck, info.shape, info.classes, TensorShard{std::max(1, static_cast<int>(deck.parallel.tensor)), 0});
  const int64_t mb = a.microbatch > 0 ? a.microbatch : deck.train.batch_size / deck.parallel.microbatches;
  Profile p = measure_profile(deck, model, mb, a.reps, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("profile of %s at microbatch %lld (%s), median of %d repetitions:\n", deck.path.c_str(),
                static_cast<long long>(mb), p.device.c_str(), a.reps);
    std::printf("%5s  %-24s %12s %12s %12s %14s %14s\n", "index", "layer", "forward ms", "backward ms", "of which W", "output bytes",
                "param bytes");
    double tf = 0, tb = 0;
    for (auto& l : p.layers) {
      std::printf("%5d  %-24s %12.4f %12.4f %12.4f %14.0f %14.0f\n", l.index, (l.name + " (" + l.type + ")").substr(0, 24).c_str(),
                  l.forward_s * 1e3, l.backward_s * 1e3, l.backward_weight_s * 1e3, l.output_bytes, l.param_bytes);
      tf += l.forward_s;
      tb += l.backward_s;
    }
    std::printf("total: forward %.3f ms, backward %.3f ms per microbatch of %lld -> %.0f samples/s on one rank\n",
                tf * 1e3, tb * 1e3, static_cast<long long>(mb), static_cast<double>(mb) / (tf + tb));
    print_achieved(deck, model, p, mb);
    if (p.network.measured)
      std::printf("network (%d ranks): p2p bandwidth %.2f GB/s, latency %.1f us\n", size, p.network.bandwidth / 1e9,
                  p.network.latency * 1e6);
    if (!a.out.empty()) {
      write_file_atomic(a.out, p.to_json());
      std::printf("wrote %s\n", a.out.c_str());
    }
  }
  return 0;
}

}  // namespace pt
