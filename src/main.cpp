// pipetrain: parse the command line and dispatch to a subcommand through one command
// table, which also builds the usage text and the unknown-command message. Every error ends
// every rank: one all ranks share (a bad deck) is printed once and all exit with its code;
// one found on a single rank is printed with the rank and aborts the job.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/memory_info.hpp"

namespace {

struct Cli {
  std::vector<std::string> args;
  size_t i = 0;
  bool more() const { return i < args.size(); }
  std::string next(const std::string& flag) {
    if (i >= args.size()) pt::fail(pt::Exit::bad_input, "command line: " + flag + " needs a value", true);
    return args[i++];
  }
  long long number(const std::string& flag);
  double real(const std::string& flag);
  std::vector<std::string> list(const std::string& flag);
};

struct Command {
  const char* name;
  const char* usage;  // options after the name
  const char* doc;    // what it does (indented lines)
  std::function<int(Cli&)> run;
};
const std::vector<Command>& commands();

std::string usage_text() {
  std::string u = "usage: pipetrain COMMAND [options]\n\ncommands:\n";
  for (const Command& c : commands()) u += std::string("  ") + c.name + " " + c.usage + "\n" + c.doc + "\n";
  return u + "\nexit codes: 0 ok, 1 internal error, 2 bad input, 3 I/O error, 4 non-finite numbers,\n"
             "            5 communication timeout, 6 no valid checkpoint; compare: 10 when runs differ\n";
}

[[noreturn]] void usage_error(const std::string& msg) {
  pt::fail(pt::Exit::bad_input, "command line: " + msg + "\n" + usage_text(), true);
}

long long Cli::number(const std::string& flag) {
  const std::string v = next(flag);
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) usage_error(flag + " expects an integer, got '" + v + "'");
  return x;
}

double Cli::real(const std::string& flag) {
  const std::string v = next(flag);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) usage_error(flag + " expects a number, got '" + v + "'");
  return x;
}

std::vector<std::string> Cli::list(const std::string& flag) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : next(flag) + ",") {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

// Options of one command: flag -> action (reads its value from the command line).
using Flags = std::vector<std::pair<std::string, std::function<void()>>>;

// Parse every remaining argument with `flags`; a bare word goes to `positional` (false:
// unexpected). Returns false after printing the usage for --help.
bool parse(Cli& cli, const std::string& cmd, const Flags& flags, const std::function<bool(const std::string&)>& positional) {
  while (cli.more()) {
    const std::string a = cli.args[cli.i++];
    if (a == "--help" || a == "-h") {
      std::printf("%s", usage_text().c_str());
      return false;
    }
    bool done = false;
    for (auto& [flag, act] : flags)
      if (a == flag) act(), done = true;
    if (done) continue;
    if (a.rfind("--set=", 0) == 0) {
      cli.args.insert(cli.args.begin() + static_cast<long>(cli.i), a.substr(6));
      for (auto& [flag, act] : flags)
        if (flag == "--set") act(), done = true;
      if (done) continue;
    }
    if (!a.empty() && a[0] != '-' && positional && positional(a)) continue;
    usage_error(cmd + ": unknown option '" + a + "'");
  }
  return true;
}

// --set and the deck file, shared by every command that reads a deck.
Flags deck_flags(Cli& cli, pt::DeckArgs& d) { return {{"--set", [&] { d.sets.push_back(cli.next("--set")); }}}; }
std::function<bool(const std::string&)> deck_positional(pt::DeckArgs& d) {
  return [&d](const std::string& a) { return d.deck.empty() ? (d.deck = a, true) : false; };
}
Flags operator+(Flags a, const Flags& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
void need_deck(const pt::DeckArgs& d, const std::string& cmd) {
  if (d.deck.empty()) usage_error(cmd + ": no deck file given");
}

int run_train(Cli& cli) {
  pt::TrainArgs t;
  if (!parse(cli, "train", deck_flags(cli, t) + Flags{{"--stop-at-step", [&] { t.stop_at_step = cli.number("--stop-at-step"); }},
                                                      {"--resume", [&] { t.resume = cli.next("--resume"); }}},
             deck_positional(t)))
    return 0;
  need_deck(t, "train");
  return pt::cmd_train(t);
}

int run_check(Cli& cli) {
  pt::CheckArgs c;
  if (!parse(cli, "check", deck_flags(cli, c) + Flags{{"--json", [&] { c.json = true; }},
                                                      {"--ranks", [&] { c.ranks = static_cast<int>(cli.number("--ranks")); }}},
             deck_positional(c)))
    return 0;
  need_deck(c, "check");
  return pt::cmd_check(c);
}

int run_schedule(Cli& cli) {
  pt::ScheduleArgs s;
  const Flags f = deck_flags(cli, s) + Flags{{"--ranks", [&] { s.ranks = static_cast<int>(cli.number("--ranks")); }},
                                             {"--steps", [&] { s.steps = cli.number("--steps"); }},
                                             {"--json", [&] { s.json = true; }},
                                             {"--unit-costs", [&] { s.unit_costs = true; }},
                                             {"--list", [&] { s.list = true; }},
                                             {"--format", [&] { s.format = cli.next("--format"); }},
                                             {"--trace", [&] { s.trace = cli.next("--trace"); }}};
  if (!parse(cli, "schedule", f, deck_positional(s))) return 0;
  if (s.list) return pt::cmd_schedule(s);
  need_deck(s, "schedule");
  if (s.ranks <= 0) usage_error("schedule: --ranks N (N >= 1) is required");
  if (s.steps <= 0) usage_error("schedule: --steps must be >= 1");
  if (s.format != "grid" && s.format != "actions") usage_error("schedule: --format is grid or actions, got '" + s.format + "'");
  return pt::cmd_schedule(s);
}

int run_profile(Cli& cli) {
  pt::ProfileArgs p;
  if (!parse(cli, "profile", deck_flags(cli, p) + Flags{{"--out", [&] { p.out = cli.next("--out"); }},
                                                        {"--reps", [&] { p.reps = static_cast<int>(cli.number("--reps")); }},
                                                        {"--microbatch", [&] { p.microbatch = cli.number("--microbatch"); }}},
             deck_positional(p)))
    return 0;
  need_deck(p, "profile");
  if (p.reps < 1) usage_error("profile: --reps must be >= 1");
  return pt::cmd_profile(p);
}

int run_emulate(Cli& cli) {
  pt::EmulateArgs e;
  if (!parse(cli, "emulate", deck_flags(cli, e) + Flags{{"--ranks", [&] { e.ranks = static_cast<int>(cli.number("--ranks")); }}},
             deck_positional(e)))
    return 0;
  need_deck(e, "emulate");
  if (e.ranks < 1) usage_error("emulate: --ranks must be >= 1");
  return pt::cmd_emulate(e);
}

// Options shared by plan and simulate (PlannerArgs).
Flags planner_flags(Cli& cli, pt::PlannerArgs& p) {
  return deck_flags(cli, p) + Flags{{"--ranks", [&] { p.ranks = static_cast<int>(cli.number("--ranks")); }},
                                    {"--profile", [&] {
                                       (p.profile.empty() ? p.profile : p.more_profiles.emplace_back()) = cli.next("--profile");
                                     }},
                                    {"--bandwidth", [&] { p.bandwidths.push_back(cli.next("--bandwidth")); }},
                                    {"--latency", [&] { p.latency = cli.real("--latency"); }},
                                    {"--memory", [&] { p.memory = cli.real("--memory"); }},
                                    {"--batch", [&] { p.batch = cli.number("--batch"); }},
                                    {"--profile-batch", [&] { p.profile_batch = cli.number("--profile-batch"); }}};
}

std::vector<int> positive_ints(Cli& cli, const std::string& flag) {
  std::vector<int> out;
  for (const std::string& m : cli.list(flag)) {
    char* end = nullptr;
    const long v = std::strtol(m.c_str(), &end, 10);
    if (*end || v < 1) usage_error(flag + " expects positive integers, got '" + m + "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

double fraction(Cli& cli, const std::string& flag) {
  const std::string v = cli.next(flag);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= 0 && x < 1)) usage_error(flag + " expects a fraction in [0, 1), got '" + v + "'");
  return x;
}

int run_plan(Cli& cli) {
  pt::PlanArgs p;
  const Flags f = planner_flags(cli, p) + Flags{{"--out", [&] { p.out = cli.next("--out"); }},
                                                {"--schedules", [&] { p.schedules = cli.list("--schedules"); }},
                                                {"--microbatches", [&] { p.microbatches = positive_ints(cli, "--microbatches"); }},
                                                {"--replicas", [&] { p.replicas = cli.next("--replicas"); }},
                                                {"--bsp-batch", [&] { p.bsp_batch = cli.number("--bsp-batch"); }},
                                                {"--batch-growth-margin", [&] { p.batch_growth_margin = fraction(cli, "--batch-growth-margin"); }},
                                                {"--cost-model", [&] { p.cost_model = cli.next("--cost-model"); }},
                                                {"--synthetic-chain", [&] { p.synthetic_chain = static_cast<int>(cli.number("--synthetic-chain")); }}};
  if (!parse(cli, "plan", f, deck_positional(p))) return 0;
  if (p.ranks <= 0) usage_error("plan: --ranks N (N >= 1) is required");
  if (p.deck.empty() && p.profile.empty() && p.synthetic_chain <= 0) usage_error("plan: give a deck or --profile FILE");
  return pt::cmd_plan(p);
}

int run_simulate(Cli& cli) {
  pt::SimulateArgs s;
  const Flags f = planner_flags(cli, s) + Flags{{"--plan", [&] { s.plan = cli.next("--plan"); }},
                                                {"--compare", [&] { s.compare = cli.next("--compare"); }},
                                                {"--trace", [&] { s.trace = cli.next("--trace"); }}};
  if (!parse(cli, "simulate", f, deck_positional(s))) return 0;
  if (s.deck.empty() && s.profile.empty()) usage_error("simulate: give a deck or --profile FILE");
  if (!s.more_profiles.empty()) usage_error("simulate: one --profile FILE (plan takes one per parallel.tensor)");
  return pt::cmd_simulate(s);
}

int run_compare(Cli& cli) {
  pt::CompareArgs c;
  const Flags f = {{"--rtol", [&] {
                      c.rtol = cli.real("--rtol");
                      if (c.rtol < 0) usage_error("compare: --rtol expects a number >= 0");
                    }},
                   {"--quiet", [&] { c.quiet = true; }}};
  auto two = [&](const std::string& a) { return c.a.empty() ? (c.a = a, true) : c.b.empty() ? (c.b = a, true) : false; };
  if (!parse(cli, "compare", f, two)) return 0;
  if (c.b.empty()) usage_error("compare: needs two run directories or weights.h5 files");
  return pt::cmd_compare(c);
}

int run_inspect(Cli& cli) {
  std::string path;
  if (!parse(cli, "inspect", {}, [&](const std::string& a) { return path.empty() ? (path = a, true) : false; })) return 0;
  if (path.empty()) usage_error("inspect: give a run directory, checkpoint directory or step folder");
  return pt::cmd_inspect(path);
}

int run_keys(Cli& cli) {
  bool md = false;
  if (!parse(cli, "keys", {{"--markdown", [&] { md = true; }}}, nullptr)) return 0;
  return pt::cmd_keys(md);
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "DECK [--set key=value]... [--stop-at-step N] [--resume RUN_DIR|FILE]",
       "                       train the deck's model (under mpirun: as a pipeline)", run_train},
      {"check", "DECK [--set key=value]... [--json] [--ranks N]",
       "                       validate the deck (and its layout on N ranks) and print the layer table", run_check},
      {"schedule", "DECK --ranks N [--steps S] [--set key=value]... [--format grid|actions] [--unit-costs] [--json]\n"
                   "           [--trace FILE] | --list",
       "                       build, validate and print the schedule IR: a rank x time grid, each rank's actions\n"
       "                       ({stage}{F|B|I|W}{unit}), or JSON with the unit-cost makespan, ideal and peak\n"
       "                       activations; --list prints every registered schedule", run_schedule},
      {"profile", "DECK [--out profile.json] [--reps N] [--microbatch N]",
       "                       measure every layer (and, under mpirun, the network)", run_profile},
      {"emulate", "DECK --ranks N [--set key=value]...",
       "                       one-process reference: apply the schedule's update rule literally\n"
       "                       for the layout of N ranks; writes weights.h5 like a run", run_emulate},
      {"plan", "[DECK] --ranks N [--profile FILE]... (one per parallel.tensor) [--out plan.json] [--bandwidth B[:RANKS]]... [--latency S]\n"
               "       [--memory BYTES] [--batch B] [--profile-batch P] [--schedules a,b] [--microbatches 1,2,4]\n"
               "       [--replicas auto|all|pow2] [--bsp-batch B] [--batch-growth-margin F]\n"
               "       [--cost-model pipetrain|pipedream[,OPTIONS]]",
       "                       choose stages, replication, schedule and microbatches (docs/PLANNER.md);\n"
       "                       --profile accepts profile.json or a PipeDream graph.txt", run_plan},
      {"simulate", "[DECK] --ranks N [--profile FILE] [--plan FILE] [--compare RUN_DIR] [--trace FILE]",
       "                       replay the schedule with profiled costs: time per minibatch, bubble, memory", run_simulate},
      {"compare", "RUN_A RUN_B [--rtol R] [--quiet]",
       "                       per-tensor difference of two runs' weights.h5 (exit 10 if beyond R;\n"
       "                       R = 0 demands bitwise identity)", run_compare},
      {"inspect", "RUN_DIR|CHECKPOINT_DIR|STEP_DIR",
       "                       list committed checkpoints, what each holds, and verify every checksum", run_inspect},
      {"keys", "[--markdown]", "                       list every deck key (docs/DECK.md is generated from it)", run_keys},
  };
  return table;
}

int dispatch(Cli& cli) {
  if (!cli.more()) usage_error("no command given");
  const std::string cmd = cli.args[cli.i++];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::printf("%s", usage_text().c_str());
    return 0;
  }
  std::string known;
  for (const Command& c : commands()) {
    if (cmd == c.name) return c.run(cli);
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  usage_error("unknown command '" + cmd + "'; known: " + known);
}

}  // namespace

int main(int argc, char** argv) {
  pt::select_blas_core(argc, argv);  // may re-exec; must precede MPI_Init
  // Started without mpirun or srun, the process is an MPI singleton, and Open MPI forks a
  // helper daemon for it unless the singleton is "isolated" (0.3 s of every `pipetrain compare`,
  // `inspect` or one-process run on a 2-core Zen 5). pipetrain spawns no processes, so it needs
  // no daemon; under a launcher the parameter is not read, and a user's own setting wins.
  setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  {
    Kokkos::InitArguments kargs;
    kargs.disable_warnings = true;
    Kokkos::ScopeGuard kokkos(kargs);
    pt::measure_runtime_base();  // the memory model's runtime base: before pipetrain allocates
    pt::memory_trace("start-up");
    Cli cli;
    for (int i = 1; i < argc; ++i) cli.args.emplace_back(argv[i]);
    try {
      code = dispatch(cli);
    } catch (const pt::Error& e) {
      code = static_cast<int>(e.code());
      if (e.collective()) {
        if (rank == 0) std::fprintf(stderr, "%s\npipetrain: %s (exit code %d)\n", e.what(), pt::exit_name(e.code()), code);
      } else {
        std::fprintf(stderr, "rank %d: %s\npipetrain: %s on rank %d (exit code %d); aborting the job\n", rank, e.what(),
                     pt::exit_name(e.code()), rank, code);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: internal error: %s\n", rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  std::fflush(stdout);
  MPI_Finalize();
  return code;
}
