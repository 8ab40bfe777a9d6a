// The subcommands of build/pipetrain; main.cpp's command table parses the command line
// into these argument structs and dispatches.
#pragma once
#include <string>
#include <vector>

namespace pt {

struct DeckArgs {
  std::string deck;
  std::vector<std::string> sets;  // --set key=value, in order
};

struct TrainArgs : DeckArgs {
  long long stop_at_step = -1;  // behave as if SIGUSR1 arrived at this step
  std::string resume;           // run directory or checkpoint file
};

struct CheckArgs : DeckArgs {
  bool json = false;
  int ranks = 0;  // check the layout for this many ranks (0: the job's)
};

struct ScheduleArgs : DeckArgs {
  int ranks = 0;
  long long steps = 1;
  bool json = false;        // makespan, ideal, bubble, peak activations of the unit-cost replay
  bool unit_costs = true;   // --unit-costs: F = I = W = 1 per rank (the only cost model here)
  bool list = false;        // --list: the registered schedules
  std::string format = "grid";  // grid | actions
  std::string trace;  // write the unit-cost replay as a Chrome trace
};

struct ProfileArgs : DeckArgs {
  std::string out;        // profile.json
  int reps = 10;          // timed repetitions (after 2 warm-up)
  long long microbatch = 0;  // 0 = the deck's microbatch size
};

// `plan` and `simulate` (src/plan/plan_command.cpp, src/sim/simulate_command.cpp; docs/PLANNER.md).
struct PlannerArgs : DeckArgs {
  int ranks = 0;
  std::string profile;                  // profile.json or graph.txt
  // plan: --profile given again, one profile per tensor degree (Profile::tensor): t is planned
  std::vector<std::string> more_profiles;
  std::vector<std::string> bandwidths;  // --bandwidth B[:RANKS], one per level, innermost first
  double latency = 0;                   // --latency seconds per message, every --bandwidth level
  double memory = -1;                   // --memory bytes per rank (-1: the deck's cluster.memory)
  long long batch = 0;                  // --batch: minibatch size (0: the deck's, else the profile's)
  long long profile_batch = 0;          // --profile-batch: samples per profiled unit (graph.txt)
};

struct PlanArgs : PlannerArgs {
  std::string out;                      // plan.json
  std::vector<std::string> schedules;   // --schedules a,b,...
  std::vector<int> microbatches;        // --microbatches 1,2,4
  std::string replicas = "auto";        // --replicas auto|all|pow2
  long long bsp_batch = 0;              // --bsp-batch: minibatch of the bsp baseline
  double batch_growth_margin = 0.10;    // --batch-growth-margin (PlanOptions::batch_growth_margin)
  int synthetic_chain = 0;              // --synthetic-chain L (benchmarks, tests)
  std::string cost_model = "pipetrain";  // --cost-model pipetrain | pipedream[,compression=R][,fewer-machines]
};

struct SimulateArgs : PlannerArgs {
  std::string plan, compare, trace;     // --plan plan.json, --compare RUN_DIR, --trace FILE
};

struct CompareArgs {
  std::string a, b;
  double rtol = 0;  // 0: demand bitwise identity
  bool quiet = false;
};

struct EmulateArgs : DeckArgs {
  int ranks = 1;  // the layout to emulate (as if run on this many ranks)
};

int cmd_train(const TrainArgs& a);
int cmd_emulate(const EmulateArgs& a);
int cmd_compare(const CompareArgs& a);
int cmd_profile(const ProfileArgs& a);
int cmd_check(const CheckArgs& a);
int cmd_schedule(const ScheduleArgs& a);
int cmd_keys(bool markdown);
int cmd_plan(const PlanArgs& a);
int cmd_simulate(const SimulateArgs& a);

// Choose OpenBLAS's kernel before it initialises: when the CPU supports a better core
// type than OpenBLAS detected, re-exec with OPENBLAS_CORETYPE set (never overriding the
// user's). Returns a one-line description for the banner.
std::string select_blas_core(int argc, char** argv);
std::string blas_description();

}  // namespace pt
