// Text forms of the IR: op names, an action as "{stage}{F|B|I|W}{unit}" (PyTorch's
// pipelining notation), each rank's compute list, and the rank x time grid of a unit-cost
// replay (quantum 1/v for v stages per rank).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "pipetrain/schedule_registry.hpp"

namespace pt {

const char* op_name(Op op) {
  switch (op) {
    case Op::forward: return "FORWARD";
    case Op::backward: return "BACKWARD";
    case Op::backward_input: return "BACKWARD_INPUT";
    case Op::backward_weight: return "BACKWARD_WEIGHT";
    case Op::send_act: return "SEND_ACT";
    case Op::recv_act: return "RECV_ACT";
    case Op::send_grad: return "SEND_GRAD";
    case Op::recv_grad: return "RECV_GRAD";
    case Op::allreduce: return "ALLREDUCE";
    case Op::optimizer_step: return "OPTIMIZER_STEP";
    case Op::grad_norm: return "GRAD_NORM";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}
bool is_backward(Op op) { return op == Op::backward || op == Op::backward_input; }
bool is_comm(Op op) { return op == Op::send_act || op == Op::recv_act || op == Op::send_grad || op == Op::recv_grad; }

std::string action_text(const Action& a) {
  const std::string s = std::to_string(a.stage), m = std::to_string(a.mb);
  switch (a.op) {
    case Op::forward: return s + "F" + m;
    case Op::backward: return s + "B" + m;
    case Op::backward_input: return s + "I" + m;
    case Op::backward_weight: return s + "W" + m;
    case Op::optimizer_step: return s + "U" + m;
    case Op::allreduce: return s + "A" + m;
    case Op::grad_norm: return s + "N" + m;
    case Op::recv_act: return s + "<" + m + ":r" + std::to_string(a.peer);
    case Op::recv_grad: return s + "(" + m + ":r" + std::to_string(a.peer);
    case Op::send_act: return s + ">" + m + ":r" + std::to_string(a.peer);
    case Op::send_grad: return s + ")" + m + ":r" + std::to_string(a.peer);
  }
  return "?";
}

std::string Schedule::actions() const {
  std::ostringstream o;
  for (size_t w = 0; w < workers.size(); ++w) {
    o << "rank " << w << ":";
    for (const Action& a : workers[w])
      if (is_compute(a.op)) o << " " << action_text(a);
    o << "\n";
  }
  return o.str();
}

namespace {

// One row of the grid: the label of each quantum the rank is busy, '.' when idle.
std::vector<std::string> grid_row(const Schedule& S, const Replay& rp, size_t w, int cols, double q, bool stage_labels) {
  std::vector<std::string> cells(static_cast<size_t>(cols + 1), ".");
  for (const ReplayEvent& e : rp.events[w]) {
    const Action& a = S.workers[w][static_cast<size_t>(e.index)];
    if (!is_compute(a.op) && a.op != Op::optimizer_step) continue;
    const int t0 = static_cast<int>(std::lround(e.start / q)), t1 = std::max(t0 + 1, static_cast<int>(std::lround(e.end / q)));
    if (a.op == Op::optimizer_step) {
      if (t0 > 0 && t0 - 1 < cols) cells[static_cast<size_t>(t0 - 1)] += "U";
      continue;
    }
    std::string label = action_text(a);
    if (!stage_labels) label = label.substr(std::to_string(a.stage).size());
    for (int t = t0; t < t1 && t < cols; ++t) cells[static_cast<size_t>(t)] = label;
  }
  return cells;
}

}  // namespace

std::string Schedule::grid() const {
  Replay rp = replay(*this, unit_costs(layout));
  std::ostringstream o;
  if (!rp.ok) return "schedule does not replay: " + rp.error + "\n";
  const int v = std::max(1, layout.chunks());
  const double q = 1.0 / v;
  const int cols = static_cast<int>(std::lround(rp.makespan / q));
  const bool stage_labels = v > 1;
  const int width = stage_labels ? 6 : 4, max_cols = 160;
  o << name() << ": " << layout.str() << ", " << steps << (steps == 1 ? " minibatch" : " minibatches");
  if (microbatches > 1) o << " x " << microbatches << " microbatches";
  o << "\nunit costs per rank: F = I = W = 1, B = 2" << (v > 1 ? " (1/" + std::to_string(v) + " each per stage; a column is 1/" + std::to_string(v) + ")" : "")
    << "; '.' idle; U optimizer step\n";
  o << "time        ";
  for (int t = 0; t < std::min(cols, max_cols); t += 5) {
    std::ostringstream lab;
    lab << t * q;
    o << lab.str() << std::string(static_cast<size_t>(std::max<int>(1, 5 * width - static_cast<int>(lab.str().size()))), ' ');
  }
  o << "\n";
  for (size_t w = 0; w < workers.size(); ++w) {
    const std::vector<std::string> cells = grid_row(*this, rp, w, cols, q, stage_labels);
    char head[32];
    std::snprintf(head, sizeof head, "r%-2zu g%d/%d    ", w, layout.group_of_rank(static_cast<int>(w)), layout.replica_of(static_cast<int>(w)));
    o << head;
    for (int t = 0; t < std::min(cols, max_cols); ++t) {
      std::string c = cells[static_cast<size_t>(t)];
      if (c.size() > static_cast<size_t>(width - 1)) c = c.substr(0, static_cast<size_t>(width - 1));
      o << c << std::string(static_cast<size_t>(width) - c.size(), ' ');
    }
    if (cols > max_cols) o << "... (" << cols << " columns)";
    o << "\n";
  }
  return o.str();
}

}  // namespace pt
