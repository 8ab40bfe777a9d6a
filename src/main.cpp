// pipetrain: parse the command line and dispatch to a subcommand. Every error ends every
// rank: one all ranks share (a bad deck) is printed once and all exit with its code; one
// found on a single rank is printed with the rank and aborts the job.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"

namespace {

const char* kUsage =
    "usage: pipetrain COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  train DECK [--set key=value]... [--stop-at-step N] [--resume RUN_DIR|FILE]\n"
    "                       train the deck's model (under mpirun: as a pipeline)\n"
    "  check DECK [--set key=value]... [--json] [--ranks N]\n"
    "                       validate the deck (and its layout on N ranks) and print the layer table\n"
    "  schedule DECK --ranks N [--steps S] [--set key=value]... [--trace FILE]\n"
    "                       print the schedule IR as a rank x time grid, after validating it\n"
    "  profile DECK [--out profile.json] [--reps N] [--microbatch N]\n"
    "                       measure every layer (and, under mpirun, the network)\n"
    "  emulate DECK --ranks N [--set key=value]...\n"
    "                       one-process reference: apply the schedule's update rule literally\n"
    "                       for the layout of N ranks; writes weights.h5 like a run\n"
    "  plan [DECK] --ranks N [--profile FILE] [--out plan.json] [--bandwidth B[:RANKS]]... [--latency S]\n"
    "       [--memory BYTES] [--batch B] [--profile-batch P] [--schedules a,b] [--microbatches 1,2,4]\n"
    "       [--replicas auto|all|pow2] [--bsp-batch B] [--cost-model pipetrain|pipedream[,OPTIONS]]\n"
    "                       choose stages, replication, schedule and microbatches (docs/PLANNER.md);\n"
    "                       --profile accepts profile.json or a PipeDream graph.txt\n"
    "  simulate [DECK] --ranks N [--profile FILE] [--plan FILE] [--compare RUN_DIR] [--trace FILE]\n"
    "                       replay the schedule with profiled costs: time per minibatch, bubble, memory\n"
    "  compare RUN_A RUN_B [--rtol R] [--quiet]\n"
    "                       per-tensor difference of two runs' weights.h5 (exit 10 if beyond R;\n"
    "                       R = 0 demands bitwise identity)\n"
    "  inspect RUN_DIR|CHECKPOINT_DIR|STEP_DIR\n"
    "                       list committed checkpoints, what each holds, and verify every checksum\n"
    "  keys [--markdown]    list every deck key (docs/DECK.md is generated from it)\n"
    "\n"
    "exit codes: 0 ok, 1 internal error, 2 bad input, 3 I/O error, 4 non-finite numbers,\n"
    "            5 communication timeout, 6 no valid checkpoint\n";

struct Cli {
  std::vector<std::string> args;
  size_t i = 0;
  bool more() const { return i < args.size(); }
  std::string next(const std::string& flag) {
    if (i >= args.size()) pt::fail(pt::Exit::bad_input, "command line: " + flag + " needs a value", true);
    return args[i++];
  }
  long long number(const std::string& flag) {
    std::string v = next(flag);
    char* end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end) pt::fail(pt::Exit::bad_input, "command line: " + flag + " expects an integer, got '" + v + "'", true);
    return x;
  }
};

[[noreturn]] void usage_error(const std::string& msg) { pt::fail(pt::Exit::bad_input, "command line: " + msg + "\n" + kUsage, true); }

bool help_flag(const std::string& a) { return a == "--help" || a == "-h"; }

int dispatch(Cli& cli) {
  if (!cli.more()) usage_error("no command given");
  const std::string cmd = cli.args[cli.i++];
  if (help_flag(cmd)) {
    std::printf("%s", kUsage);
    return 0;
  }
  auto deck_flags = [&](pt::DeckArgs& d, const std::string& a) {
    if (a == "--set") { d.sets.push_back(cli.next("--set")); return true; }
    if (a.rfind("--set=", 0) == 0) { d.sets.push_back(a.substr(6)); return true; }
    if (!a.empty() && a[0] != '-' && d.deck.empty()) { d.deck = a; return true; }
    return false;
  };
  auto need_deck = [&](const pt::DeckArgs& d) { if (d.deck.empty()) usage_error(cmd + ": no deck file given"); };
  if (cmd == "train") {
    pt::TrainArgs t;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (deck_flags(t, a)) continue;
      if (a == "--stop-at-step") t.stop_at_step = cli.number(a);
      else if (a == "--resume") t.resume = cli.next(a);
      else usage_error("train: unknown option '" + a + "'");
    }
    need_deck(t);
    return pt::cmd_train(t);
  }
  if (cmd == "check") {
    pt::CheckArgs c;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (deck_flags(c, a)) continue;
      if (a == "--json") c.json = true;
      else if (a == "--ranks") c.ranks = static_cast<int>(cli.number(a));
      else usage_error("check: unknown option '" + a + "'");
    }
    need_deck(c);
    return pt::cmd_check(c);
  }
  if (cmd == "schedule") {
    pt::ScheduleArgs s;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (deck_flags(s, a)) continue;
      if (a == "--ranks") s.ranks = static_cast<int>(cli.number(a));
      else if (a == "--steps") s.steps = cli.number(a);
      else if (a == "--json") s.json = true;
      else if (a == "--trace") s.trace = cli.next(a);
      else usage_error("schedule: unknown option '" + a + "'");
    }
    need_deck(s);
    if (s.ranks <= 0) usage_error("schedule: --ranks N (N >= 1) is required");
    if (s.steps <= 0) usage_error("schedule: --steps must be >= 1");
    return pt::cmd_schedule(s);
  }
  if (cmd == "profile") {
    pt::ProfileArgs p;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (deck_flags(p, a)) continue;
      if (a == "--out") p.out = cli.next(a);
      else if (a == "--reps") p.reps = static_cast<int>(cli.number(a));
      else if (a == "--microbatch") p.microbatch = cli.number(a);
      else usage_error("profile: unknown option '" + a + "'");
    }
    need_deck(p);
    if (p.reps < 1) usage_error("profile: --reps must be >= 1");
    return pt::cmd_profile(p);
  }
  if (cmd == "emulate") {
    pt::EmulateArgs e;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (deck_flags(e, a)) continue;
      if (a == "--ranks") e.ranks = static_cast<int>(cli.number(a));
      else usage_error("emulate: unknown option '" + a + "'");
    }
    need_deck(e);
    if (e.ranks < 1) usage_error("emulate: --ranks must be >= 1");
    return pt::cmd_emulate(e);
  }
  // plan / simulate: shared options of the planner (PlannerArgs)
  auto number_f = [&](const std::string& flag) {
    std::string v = cli.next(flag);
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end) usage_error(flag + " expects a number, got '" + v + "'");
    return x;
  };
  auto planner_flags = [&](pt::PlannerArgs& p, const std::string& a) {
    if (deck_flags(p, a)) return true;
    if (a == "--ranks") p.ranks = static_cast<int>(cli.number(a));
    else if (a == "--profile") p.profile = cli.next(a);
    else if (a == "--bandwidth") p.bandwidths.push_back(cli.next(a));
    else if (a == "--latency") p.latency = number_f(a);
    else if (a == "--memory") p.memory = number_f(a);
    else if (a == "--batch") p.batch = cli.number(a);
    else if (a == "--profile-batch") p.profile_batch = cli.number(a);
    else return false;
    return true;
  };
  auto list = [&](const std::string& flag) {
    std::vector<std::string> out;
    std::string v = cli.next(flag), cur;
    for (char ch : v + ",") {
      if (ch == ',') { if (!cur.empty()) out.push_back(cur); cur.clear(); }
      else cur += ch;
    }
    return out;
  };
  if (cmd == "plan") {
    pt::PlanArgs p;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (planner_flags(p, a)) continue;
      if (a == "--out") p.out = cli.next(a);
      else if (a == "--schedules") p.schedules = list(a);
      else if (a == "--microbatches") {
        for (auto& m : list(a)) {
          char* end = nullptr;
          long v = std::strtol(m.c_str(), &end, 10);
          if (*end || v < 1) usage_error("--microbatches expects positive integers, got '" + m + "'");
          p.microbatches.push_back(static_cast<int>(v));
        }
      }
      else if (a == "--replicas") p.replicas = cli.next(a);
      else if (a == "--bsp-batch") p.bsp_batch = cli.number(a);
      else if (a == "--cost-model") p.cost_model = cli.next(a);  // docs/PLANNER.md
      else if (a == "--synthetic-chain") p.synthetic_chain = static_cast<int>(cli.number(a));  // benchmarks
      else usage_error("plan: unknown option '" + a + "'");
    }
    if (p.ranks <= 0) usage_error("plan: --ranks N (N >= 1) is required");
    if (p.deck.empty() && p.profile.empty() && p.synthetic_chain <= 0) usage_error("plan: give a deck or --profile FILE");
    return pt::cmd_plan(p);
  }
  if (cmd == "simulate") {
    pt::SimulateArgs s;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (planner_flags(s, a)) continue;
      if (a == "--plan") s.plan = cli.next(a);
      else if (a == "--compare") s.compare = cli.next(a);
      else if (a == "--trace") s.trace = cli.next(a);
      else usage_error("simulate: unknown option '" + a + "'");
    }
    if (s.deck.empty() && s.profile.empty()) usage_error("simulate: give a deck or --profile FILE");
    return pt::cmd_simulate(s);
  }
  if (cmd == "compare") {
    pt::CompareArgs c;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (a == "--rtol") {
        std::string v = cli.next(a);
        char* end = nullptr;
        c.rtol = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || c.rtol < 0) usage_error("compare: --rtol expects a number >= 0, got '" + v + "'");
      } else if (a == "--quiet") {
        c.quiet = true;
      } else if (c.a.empty()) {
        c.a = a;
      } else if (c.b.empty()) {
        c.b = a;
      } else {
        usage_error("compare: unexpected argument '" + a + "'");
      }
    }
    if (c.b.empty()) usage_error("compare: needs two run directories or weights.h5 files");
    return pt::cmd_compare(c);
  }
  if (cmd == "inspect") {
    std::string path;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (help_flag(a)) { std::printf("%s", kUsage); return 0; }
      if (path.empty() && !a.empty() && a[0] != '-') path = a;
      else usage_error("inspect: unexpected argument '" + a + "'");
    }
    if (path.empty()) usage_error("inspect: give a run directory, checkpoint directory or step folder");
    return pt::cmd_inspect(path);
  }
  if (cmd == "keys") {
    bool md = false;
    while (cli.more()) {
      std::string a = cli.args[cli.i++];
      if (a == "--markdown") md = true;
      else usage_error("keys: unknown option '" + a + "'");
    }
    return pt::cmd_keys(md);
  }
  usage_error("unknown command '" + cmd + "'; known: train, check, schedule, profile, emulate, plan, simulate, compare, keys");
}

}  // namespace

int main(int argc, char** argv) {
  pt::select_blas_core(argc, argv);  // may re-exec; must precede MPI_Init
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  {
    Kokkos::InitArguments kargs;
    kargs.disable_warnings = true;
    Kokkos::ScopeGuard kokkos(kargs);
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
