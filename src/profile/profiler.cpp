// Measuring a profile: every layer's forward and backward at the deck's microbatch size
// (warm-up excluded, median of repetitions), its bytes, the optimizer cost, and under
// mpirun the point-to-point and allreduce times that form the network model.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdio>

#include "pipetrain/error.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/rng.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/clip.hpp"
#include "pipetrain/engine.hpp"

namespace pt {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// The timed repetitions of every layer (seconds per pass; kc: summed library clocks).
struct Timings {
  const std::vector<std::vector<double>>& tf;
  const std::vector<std::vector<double>>& tb;
  const std::vector<std::vector<double>>& tw;
  const std::vector<Backend::KernelClock>& kc;
  const std::vector<std::vector<double>>& ts;  // the backward under selective recomputation (its layers only)
};

// Per layer: medians of the timings, the library shares, and the bytes it moves and keeps.
std::vector<LayerProfile> summarise(const Model& model, const Timings& t, int64_t mb, bool bf16) {
  std::vector<LayerProfile> out;
  const Precision prec = bf16 ? Precision::bf16 : Precision::fp32;
  bool computed = false;  // some layer other than a view ran: its output is bf16 on the wire
  for (int l = 0; l < model.size(); ++l) {
    const size_t i = static_cast<size_t>(l);
    const Layer& layer = model.layer(l);
    computed = computed || !layer.is_view();
    LayerProfile p;
    p.index = l;
    p.name = layer.name();
    p.type = layer.type();
    p.forward_s = median(t.tf[i]);
    p.backward_s = median(t.tb[i]);
    p.backward_weight_s = std::min(p.backward_s, median(t.tw[i]));
    // the libraries' shares of the repetitions' summed time, applied to the median time
    const double summed = std::accumulate(t.tf[i].begin(), t.tf[i].end(), 0.0) +
                          std::accumulate(t.tb[i].begin(), t.tb[i].end(), 0.0);
    const double scale = summed > 0 ? (p.forward_s + p.backward_s) / summed : 0.0;
    p.product_s = t.kc[i].product_s * scale;
    p.convert_s = t.kc[i].convert_s * scale;
    p.output_bytes = static_cast<double>(mb * layer.out_shape().numel() * (bf16 && computed ? 2 : 4));
    const int64_t out_floats = layer.is_view() ? 0 : layer.out_shape().numel();
    p.stash_bytes = static_cast<double>(mb * (out_floats + layer.aux_floats(Recompute::none, prec)) * 4);
    p.param_bytes = static_cast<double>(layer.num_params() * 4);
    p.tensor_sums = layer.tensor_sums();
    p.tensor_sum_bytes = static_cast<double>(mb * layer.tensor_sum_floats() * 4);
    if (layer.recomputes_selectively()) {
      p.selective_stash_bytes = static_cast<double>(mb * (out_floats + layer.aux_floats(Recompute::selective, prec)) * 4);
      p.selective_backward_s = median(t.ts[i]);
    }
    out.push_back(p);
  }
  return out;
}

// The profiled stage's parameters (initialised as a run's), a synthetic input (valid token
// ids for a token model) and labels, in backend memory.
void fill_profile_inputs(Backend& be, const Model& model, const Stage& st, uint64_t seed, int64_t mb, WeightStore& weights,
                         Stage::Slot& slot) {
  const int64_t per_sample = model.layer(model.size() - 1).labels_per_sample();
  std::vector<float> host(static_cast<size_t>(st.num_params()));
  st.init_params(host.data(), seed);
  be.from_host(weights.latest(), host.data(), host.size());
  std::vector<float> x(static_cast<size_t>(mb * st.in_shape().numel()));
  const uint64_t key = rng_key(seed, Stream::synthetic, 12345);
  const bool tokens = st.in_shape().is_tokens;  // token ids must be valid rows of the embedding
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = tokens ? static_cast<float>(rng_below(key, i, static_cast<uint64_t>(model.classes()))) : 2.0f * rng_uniform(key, i) - 1.0f;
  be.from_host(slot.input, x.data(), x.size());
  std::vector<int32_t> lab(static_cast<size_t>(mb * per_sample));
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int32_t>(static_cast<int64_t>(i) % model.classes());
  be.labels_from_host(slot.labels, lab.data(), lab.size());
}

// Seconds per parameter byte of one update as a run does it (Executor::on_optimizer_step and
// the first read after it), over the whole parameter buffer, median of `reps` after `warmup`:
// the clip's scaling (a coefficient below 1), the step of the run's optimizer, zeroing the
// gradients and, in bf16, rebuilding the compute copy and its bf16 array from the master.
// (This was SGD alone: on gpt2_small in bf16 with AdamW and clipping the update took 162 ms
// per rank where the profile said 36, and the simulator under-predicted the step by 4-9%.)
double optimizer_seconds_per_byte(Backend& be, WeightStore& weights, Buffer& grads, int reps, int warmup,
                                  const UpdateRule& update) {
  const size_t n = weights.size();
  OptimConfig sgd;
  sgd.optimizer = find_optimizer("sgd");
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  sgd.lr_schedule = find_lr_schedule("constant");
  OptimConfig cfg = update.optim ? *update.optim : sgd;
  cfg.lr = std::min(cfg.lr, 1e-6);  // the values do not matter; keep them finite over the reps
  Optimizer opt(cfg, be, n, 100);
  std::vector<double> ts;
  for (int rep = 0; rep < warmup + reps; ++rep) {
    be.synchronize();
    const double t0 = now_s();
    if (update.clip) apply_clip(be, grads.data(), n, 0.999f);
    opt.step(weights.latest(), grads.data(), 1.0f);
    be.fill(grads.data(), 1e-3f, n);  // as the run's zeroing (a fill), to values the next rep can use
    weights.latest_changed();
    (void)weights.read_latest();  // bf16: the compute copy and its bf16 array, rebuilt
    be.synchronize();
    if (rep >= warmup) ts.push_back(now_s() - t0);
  }
  return n > 0 ? median(ts) / static_cast<double>(n * 4) : 0.0;
}

// Parallel.recompute = "selective": the backward of each layer that recomputes selectively,
// with its recomputation, timed on a stage laid out that way (its forward first, untimed, to
// fill the selective slot). Empty vectors for the other layers.
std::vector<std::vector<double>> selective_backward_times(Backend& be, const Model& model, const Stage& none, int64_t mb,
                                                          int reps, int warmup, const float* params, Buffer& grads,
                                                          Buffer& dy, Buffer& dx, const LayerCtx& ctx) {
  const int L = model.size();
  std::vector<std::vector<double>> ts(static_cast<size_t>(L));
  bool any = false;
  for (int l = 0; l < L; ++l) any = any || model.layer(l).recomputes_selectively();
  if (!any) return ts;
  Stage st(be, model, 0, L, mb, 1, true, Recompute::selective, none.precision());
  Buffer mem(be, static_cast<size_t>(st.slot_floats()));
  Stage::Slot slot = st.carve(mem.data(), const_cast<int32_t*>(ctx.labels));
  be.fill(mem.data(), 0.0f, mem.size());
  for (int rep = 0; rep < warmup + reps; ++rep)
    for (int l = L - 1; l >= 0; --l) {
      if (!model.layer(l).recomputes_selectively()) continue;
      st.forward_layer(l, slot, params, ctx, mb);
      be.timer_start();
      st.backward_layer(l, slot, params, grads.data(), dy.data(), l == 0 ? nullptr : dx.data(), ctx, mb);
      const double t = be.timer_stop();
      if (rep >= warmup) ts[static_cast<size_t>(l)].push_back(t);
    }
  return ts;
}

// The tensor group of a profiled part: its sums do nothing (the part's compute alone; the
// simulator adds each sum's cost from the network model).
struct ComputeOnly final : TensorGroup {
  explicit ComputeOnly(TensorShard s) : shard(s) {}
  TensorShard shard;
  int size() const override { return shard.parts; }
  int rank() const override { return shard.rank; }
  void sum(Backend&, float*, int64_t) const override {}
  void max(Backend&, float*, int64_t) const override {}
  void gather(const double* mine, double* all, int64_t count) const override {
    for (int k = 0; k < shard.parts; ++k) std::copy(mine, mine + count, all + k * count);
  }
  void allgather(Backend&, float*, int64_t, int64_t) const override {}
};

}  // namespace

std::vector<LayerProfile> measure_layers(Backend& be, const Model& model, Precision p, int64_t mb, int reps,
                                         uint64_t seed, double* optimizer_s_per_byte, const UpdateRule& update) {
  const int L = model.size();
  // with the split backward's regions (W is timed alone too); products in p, activations
  // rounded and operands kept as in training
  Stage st(be, model, 0, L, mb, 1, true, Recompute::none, p);
  const bool bf16 = p == Precision::bf16;
  // the parameters as a run holds them (in bf16 the layers read the compute copy and its bf16
  // array, so GEMMs read weights as a run's do)
  WeightStore weights(be, static_cast<size_t>(st.num_params()), bf16);
  weights.set_operand_only(st.operand_only_ranges());
  Buffer grads(be, static_cast<size_t>(st.num_params()));
  Buffer slot_mem(be, static_cast<size_t>(st.slot_floats()));
  const int64_t per_sample = model.layer(L - 1).labels_per_sample();  // T for a language model's head
  int32_t* labels = be.alloc_int(static_cast<size_t>(mb * per_sample));
  Stage::Slot slot = st.carve(slot_mem.data(), labels);
  fill_profile_inputs(be, model, st, seed, mb, weights, slot);
  const ParamView params = weights.read_latest();
  const size_t scratch = static_cast<size_t>(mb * st.max_numel());
  Buffer dy(be, scratch), dx(be, scratch);
  be.fill(dy.data(), 1e-3f, scratch);
  LayerCtx ctx{be, seed, 0, true, labels, 1.0f / static_cast<float>(mb)};
  const ComputeOnly part(model.shard());
  ctx.tensor = &part;  // a split model: one part's compute, its sums costed by the simulator
  std::vector<std::vector<double>> tf(static_cast<size_t>(L)), tb(static_cast<size_t>(L)), tw(static_cast<size_t>(L));
  std::vector<Backend::KernelClock> kc(static_cast<size_t>(L));  // summed over the timed repetitions
  const int warmup = 2;
  // time one pass of layer l (CUDA events on a GPU, a steady clock on the host) into `into`,
  // and its library and conversion seconds into kc[l]
  auto timed = [&](int l, int rep, std::vector<std::vector<double>>& into, auto&& pass) {
    const Backend::KernelClock k0 = be.kernel_clock();
    be.timer_start();
    pass();
    const double t = be.timer_stop();
    if (rep < warmup) return;
    into[static_cast<size_t>(l)].push_back(t);
    const Backend::KernelClock k1 = be.kernel_clock();
    kc[static_cast<size_t>(l)].product_s += k1.product_s - k0.product_s;
    kc[static_cast<size_t>(l)].convert_s += k1.convert_s - k0.convert_s;
  };
  for (int rep = 0; rep < warmup + reps; ++rep) {
    for (int l = 0; l < L; ++l) timed(l, rep, tf, [&] { st.forward_layer(l, slot, params, ctx, mb); });
    for (int l = L - 1; l >= 0; --l) {
      timed(l, rep, tb, [&] {
        st.backward_layer(l, slot, params, grads.data(), dy.data(), l == 0 ? nullptr : dx.data(), ctx, mb);
      });
      if (!model.layer(l).splits_backward()) continue;
      be.timer_start();  // the weight-gradient half alone (W of the zero-bubble schedules)
      st.backward_weight_layer(l, slot, params, grads.data(), dy.data(), ctx, mb);
      const double w = be.timer_stop();
      if (rep >= warmup) tw[static_cast<size_t>(l)].push_back(w);
    }
  }
  std::vector<std::vector<double>> ts = selective_backward_times(be, model, st, mb, reps, warmup, params, grads, dy, dx, ctx);
  std::vector<LayerProfile> out = summarise(model, Timings{tf, tb, tw, kc, ts}, mb, bf16);
  if (optimizer_s_per_byte) *optimizer_s_per_byte = optimizer_seconds_per_byte(be, weights, grads, reps, warmup, update);
  be.release_int(labels);
  return out;
}

NetworkModel measure_network(MPI_Comm comm, double timeout_s) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  NetworkModel net;
  if (size < 2) return net;
  net.measured = true;
  net.allreduce_ranks = size;
  const std::vector<double> sizes = {1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24};
  std::vector<float> buf(static_cast<size_t>(sizes.back() / 4), 1.0f);
  auto timed_wait = [&](MPI_Request* r) {
    const double deadline = now_s() + timeout_s;
    int done = 0;
    while (!done) {
      MPI_Test(r, &done, MPI_STATUS_IGNORE);
      if (!done && now_s() > deadline) fail(Exit::timeout, "network profile: peer did not answer within run.comm_timeout_s");
    }
  };
  for (double bytes : sizes) {
    const int count = static_cast<int>(bytes / 4);
    const int reps = bytes >= (1 << 22) ? 5 : 20;
    std::vector<double> t;
    for (int r = 0; r < reps + 2; ++r) {
      MPI_Request req;
      MPI_Ibarrier(comm, &req);
      timed_wait(&req);
      const double t0 = now_s();
      if (rank == 0) {
        MPI_Isend(buf.data(), count, MPI_FLOAT, 1, 5, comm, &req);
        timed_wait(&req);
        MPI_Irecv(buf.data(), count, MPI_FLOAT, 1, 6, comm, &req);
        timed_wait(&req);
      } else if (rank == 1) {
        MPI_Irecv(buf.data(), count, MPI_FLOAT, 0, 5, comm, &req);
        timed_wait(&req);
        MPI_Isend(buf.data(), count, MPI_FLOAT, 0, 6, comm, &req);
        timed_wait(&req);
      }
      if (r >= 2) t.push_back((now_s() - t0) / 2);
    }
    net.p2p.push_back({bytes, median(t)});
    std::vector<double> ta;
    for (int r = 0; r < reps + 2; ++r) {
      MPI_Request req;
      MPI_Ibarrier(comm, &req);
      timed_wait(&req);
      const double t0 = now_s();
      MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, comm, &req);
      timed_wait(&req);
      if (r >= 2) ta.push_back(now_s() - t0);
    }
    net.allreduce.push_back({bytes, median(ta)});
  }
  // rank 0's p2p numbers are the reference: share them
  std::vector<double> flat;
  for (auto& p : net.p2p) flat.push_back(p.seconds);
  for (auto& p : net.allreduce) flat.push_back(p.seconds);
  MPI_Bcast(flat.data(), static_cast<int>(flat.size()), MPI_DOUBLE, 0, comm);
  for (size_t i = 0; i < net.p2p.size(); ++i) net.p2p[i].seconds = flat[i];
  for (size_t i = 0; i < net.allreduce.size(); ++i) net.allreduce[i].seconds = flat[net.p2p.size() + i];
  // least squares t = latency + bytes / bandwidth
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(net.p2p.size());
  for (auto& p : net.p2p) sx += p.bytes, sy += p.seconds, sxx += p.bytes * p.bytes, sxy += p.bytes * p.seconds;
  const double slope = (n * sxy - sx * sy) / std::max(1e-30, n * sxx - sx * sx);
  net.bandwidth = slope > 0 ? 1.0 / slope : 1e12;
  net.latency = std::max(0.0, (sy - slope * sx) / n);
  return net;
}

}  // namespace pt
