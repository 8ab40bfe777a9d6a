// The deck's own keys: every key of [run], [data], [train], [parallel], [checkpoint] and
// [cluster] and of a [[cluster.levels]] table, declared with the member it fills, its default,
// range and doc (keys.hpp); the member's type is the key's type. Layer types declare theirs
// beside their classes (src/layers). Choices come from the enums' name tables and the
// registries (optimizers, learning-rate schedules, schedules).
#include "schema.hpp"

#include "pipetrain/data.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

std::vector<Key<Deck>> run_keys() {
  using R = Deck::Run;
  return section_keys(
      "run", &Deck::run,
      {key("name", &R::name, "run", "run directory name under run.output_dir"),
       key("output_dir", &R::output_dir, "runs", "parent folder of run directories (relative to the working directory)"),
       key("seed", &R::seed, 1, key_ge(0), "seed of every random stream (init, shuffle, dropout, synthetic data)"),
       key("device", &R::device, Device::cpu, "compute device (cuda needs a build with CUDA=1)"),
       key("debug_versions", &R::debug_versions, false,
           "write versions.jsonl: the weight version read by every forward and backward"),
       key("plots", &R::plots, true,
           "after training, draw timeline.png and accuracy.png into the run directory (tools/plot.py, python3-matplotlib)"),
       key("initial_weights", &R::initial_weights, false,
           "also write weights_init.h5, the initial weights and running state (tools/pytorch_twin.py loads them)"),
       key("comm_timeout_s", &R::comm_timeout_s, 300.0, key_gt(0), "deadline of every wait on a message or collective, seconds")});
}

std::vector<Key<Deck>> data_keys() {
  using D = Deck::Data;
  return section_keys(
      "data", &Deck::data,
      {key("source", &D::source, DataSource::fashion_mnist, "where samples come from (text and tokens: docs/DATA.md)"),
       key("path", &D::path, "/usr/share/datasets/fashion-mnist",
           "fashion-mnist: folder of the four IDX .gz files; text: a plain-text file or a folder of them (when unset: "
           "/usr/share/games/fortunes)"),
       key("train", &D::train, "",
           "hdf5: training file with /images (N,C,H,W or N,F float32/uint8) and /labels (N int); tokens: training tokens, a "
           ".bin of little-endian uint16 or a .h5/.hdf5 with a 1-D integer /tokens"),
       key("test", &D::test, "", "hdf5: test file, same layout; tokens: test (validation) tokens, same formats"),
       key("shape", &D::shape, std::vector<int64_t>{}, key_gt(0), "synthetic: per-sample shape, e.g. [3, 64, 64]"),
       key("classes", &D::classes, 10, key_between(2, 1e9), "synthetic: number of classes"),
       key("train_samples", &D::train_samples, 8192, key_gt(0), "synthetic: training samples per epoch"),
       key("test_samples", &D::test_samples, 1024, key_gt(0), "synthetic: test samples"),
       key("normalize", &D::normalize, true,
           "fashion-mnist/uint8 hdf5: scale to [0,1] then standardise with the dataset mean and std"),
       key("seq_len", &D::seq_len, 128, key_gt(0),
           "text/tokens: positions per sample; a sample reads seq_len + 1 tokens and predicts the next one at each position"),
       key("vocab", &D::vocab, 0, key_between(0, static_cast<double>(kMaxVocab)),
           "tokens: vocabulary size, required (e.g. 50304 for GPT-2 tokens); text: 256, one token per byte")});
}

std::vector<Key<Deck>> train_optimizer_keys() {
  using T = Deck::Train;
  return section_keys(
      "train", &Deck::train,
      {key("batch_size", &T::batch_size, 128, key_between(1, 1e7), "samples per optimizer step (the minibatch)"),
       key("epochs", &T::epochs, 1, key_between(1, 1e6), "passes over the training set"),
       key("max_steps", &T::max_steps, 0, key_ge(0), "stop after this many optimizer steps in total (0 = no limit)"),
       key("optimizer", &T::optimizer, "sgd", "optimizer"),
       key("lr", &T::lr, 0.05, key_gt(0), "peak learning rate"),
       key("momentum", &T::momentum, 0.9, key_between(0, 1, true), "sgd momentum"),
       key("nesterov", &T::nesterov, false, "sgd: Nesterov momentum"),
       key("weight_decay", &T::weight_decay, 0.0, key_ge(0),
           "L2 (sgd) or decoupled (adamw) weight decay, applied to every parameter"),
       key("beta1", &T::beta1, 0.9, key_between(0, 1, true), "adamw beta1"),
       key("beta2", &T::beta2, 0.999, key_between(0, 1, true), "adamw beta2"),
       key("eps", &T::eps, 1e-8, key_gt(0), "adamw epsilon"),
       key("lr_schedule", &T::lr_schedule, "constant", "learning-rate schedule over optimizer steps"),
       key("warmup_steps", &T::warmup_steps, 0, key_ge(0),
           "linear warm-up from lr/warmup_steps to lr over this many steps (more than the run's steps: a warning naming "
           "both keys)"),
       key("step_size", &T::step_size, 1000, key_gt(0), "step schedule: multiply by gamma every step_size steps"),
       key("gamma", &T::gamma, 0.1, key_gt(0), "step schedule factor"),
       key("min_lr", &T::min_lr, 0.0, key_ge(0),
           "cosine schedule: final learning rate; once reached (warm-up included) the rate never falls below it"),
       key("clip_grad_norm", &T::clip_grad_norm, 0.0, key_ge(0),
           "clip the gradient's global L2 norm to this before each update, as torch.nn.utils.clip_grad_norm_ (0 = off): "
           "over every parameter of the model (all stages, a tied weight once), in fp32 after the replica reduction; "
           "metrics.jsonl records grad_norm, the norm before clipping. Asynchronous schedules clip each stage's update "
           "against its share max * sqrt(stage parameters / model parameters) (docs/ARCHITECTURE.md, \"Gradient clipping\")")});
}

std::vector<Key<Deck>> train_run_keys() {
  using T = Deck::Train;
  return section_keys(
      "train", &Deck::train,
      {key("target_accuracy", &T::target_accuracy, 0.0, key_between(0, 1),
           "record the wall time at which test accuracy first reaches this (0 = off)"),
       key("target_loss", &T::target_loss, 0.0, key_ge(0),
           "record the wall time at which the test loss (nats) first falls to this (0 = off; text: 1.3863 nats = 2 bits "
           "per byte)"),
       key("log_every", &T::log_every, 50, key_gt(0), "steps between progress lines and metrics.jsonl records"),
       key("eval_every", &T::eval_every, 0, key_ge(0),
           "also evaluate every this many steps (0 = at epoch ends only); the pipeline drains there"),
       key("eval_batch_size", &T::eval_batch_size, 0, key_between(0, 1e7),
           "samples per microbatch when evaluating the test set; 0 = sized to fit: the largest whose evaluation buffers "
           "stay within 1/8 of the rank's memory budget, at most 64 and the test set (docs/ARCHITECTURE.md, \"Memory\")"),
       key("precision", &T::precision, Precision::fp32,
           "compute precision: bf16 = bf16 GEMM/conv inputs with fp32 accumulation, bf16 activations and stage messages; "
           "fp32 master weights, gradients, optimizer state, statistics and loss (docs/PRECISION.md)"),
       key("nonfinite", &T::nonfinite, Nonfinite::abort,
           "on a non-finite loss or gradient: abort the job, or drop that update deterministically")});
}

std::vector<Key<Deck>> parallel_keys() {
  using P = Deck::Parallel;
  auto get_split = [](const P& p) { return IntListOrAuto{p.split_auto, p.split}; };
  auto set_split = [](P& p, const IntListOrAuto& v) { p.split_auto = v.is_auto, p.split = v.list; };
  return section_keys(
      "parallel", &Deck::parallel,
      {key_via<P>("split", get_split, set_split, IntListOrAuto{}, key_gt(0),
                  "first layer index of stages 2..K (e.g. [2, 4, 5]; p x v stages for looped/v placements), or \"auto\" to "
                  "profile and plan"),
       key("replicas", &P::replicas, std::vector<int64_t>{}, key_between(1, 1e6),
           "replicas per rank group (per stage when contiguous), group-major rank order (default: 1 each; one stage on N "
           "ranks: [N])"),
       key("schedule", &P::schedule, flagged_schedule(&ScheduleDef::deck_default).name, "pipeline schedule (`pipetrain schedule --list` says what each does)")
           .choices(schedule_names()),
       key("placement", &P::placement, std::nullopt,
           "stages on ranks: contiguous (one stage per rank), looped (rank r holds r, r+p, ...), v (r and 2p-1-r); auto = "
           "the schedule's"),
       key("microbatches", &P::microbatches, 1, key_between(1, 1e6),
           "microbatches per minibatch (flush schedules and 2bw); must divide train.batch_size"),
       key("tensor", &P::tensor, 1, key_between(0, 1024),
           "tensor parallelism: ranks per tensor group, adjacent in rank order; attention and transformer_block layers "
           "split their heads and MLP across them (Megatron's column/row split), embedding and lm_head their "
           "vocabulary, linear layers by their `tensor` key; other layers are replicated; the "
           "layout then places world size / tensor ranks (docs/ARCHITECTURE.md \"Tensor parallelism\"); 0 = auto: with "
           "split = \"auto\" the planner chooses it among the divisors of the ranks the model's heads allow"),
       key("profile", &P::profile, "", "split = \"auto\": read this profile.json instead of profiling"),
       key("allreduce", &P::allreduce, Allreduce::mpi,
           "replica gradient reduction (nccl needs CUDA=1 and run.device = \"cuda\")"),
       key("recompute", &P::recompute, Recompute::none,
           "activation recomputation, one value for every stage or an array with one per stage: none keeps every "
           "activation until the backward; selective drops the attention probabilities and the MLP hidden activations of "
           "transformer blocks and recomputes them in the backward; full keeps only each stage's input and output per unit "
           "in flight and reruns the stage's forward before its backward (bitwise the same results; docs/ARCHITECTURE.md). "
           "Unset with split = \"auto\": the planner may choose one under the memory budget (docs/PLANNER.md)")});
}

std::vector<Key<Deck>> checkpoint_cluster_keys() {
  using C = Deck::Checkpoint;
  std::vector<Key<Deck>> s = section_keys(
      "checkpoint", &Deck::checkpoint,
      {key("dir", &C::dir, "", "checkpoint folder (\"\" = <run dir>/checkpoints)"),
       key("every_steps", &C::every_steps, 0, key_ge(0), "checkpoint every this many steps (0 = off)"),
       key("every_seconds", &C::every_seconds, 0.0, key_ge(0),
           "checkpoint when this much wall time passed since the last one (0 = off)"),
       key("at_end", &C::at_end, true, "checkpoint after the last step (for --resume with more epochs)"),
       key("keep", &C::keep, 2, key_ge(1), "committed checkpoints kept; older ones are pruned after a commit")});
  for (Key<Deck>& k : section_keys("cluster", &Deck::cluster,
                                   {key("memory", &Deck::Cluster::memory, 0.0, key_ge(0),
                                        "memory budget per rank in bytes: the planner's cap and the trainer's fit check "
                                        "(0 = the node's available memory / its ranks)"),
                                    key("peak_gflops", &Deck::Cluster::peak_gflops, 0.0, key_ge(0),
                                        "the machine's matmul peak per rank in the run's precision, GFLOP/s (bench/kernels.sh "
                                        "measures it); token models then report mfu, model FLOPs utilisation (0 = not reported)")}))
    s.push_back(std::move(k));
  return s;
}

}  // namespace

const std::vector<Key<Deck>>& deck_schema() {
  static const std::vector<Key<Deck>> s = [] {
    std::vector<Key<Deck>> all;
    for (auto part : {run_keys, data_keys, train_optimizer_keys, train_run_keys, parallel_keys, checkpoint_cluster_keys})
      for (Key<Deck>& k : part()) all.push_back(std::move(k));
    return all;
  }();
  return s;
}

const std::vector<Key<ClusterLevel>>& cluster_level_keys() {
  using L = ClusterLevel;
  static const std::vector<Key<L>> k = {
      required_key("ranks", &L::ranks, key_gt(0),
                   "ranks in one component of this level (e.g. 8 in a server, then 64 in a rack)"),
      required_key("bandwidth", &L::bandwidth, key_gt(0),
                   "bytes/s of the links inside one component: level 0 between ranks, level 1 between the level-0 "
                   "components it holds, ..."),
      key("latency", &L::latency, 0.0, key_ge(0), "seconds per message")};
  return k;
}

const std::vector<std::string>& deck_sections() {
  static const std::vector<std::string> s = {"run", "data", "model", "train", "parallel", "checkpoint", "cluster"};
  return s;
}

OptimConfig optim_config(const Deck::Train& t) {
  OptimConfig c;
  c.optimizer = t.optimizer;
  c.lr_schedule = t.lr_schedule;
  c.lr = t.lr, c.momentum = t.momentum, c.weight_decay = t.weight_decay;
  c.beta1 = t.beta1, c.beta2 = t.beta2, c.eps = t.eps;
  c.nesterov = t.nesterov;
  c.warmup_steps = t.warmup_steps, c.step_size = t.step_size;
  c.gamma = t.gamma, c.min_lr = t.min_lr;
  return c;
}

}  // namespace pt
