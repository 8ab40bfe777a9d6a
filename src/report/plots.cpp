// The plots of a finished run (run.plots): tools/plot.py, found beside the binary, draws the
// pipeline timeline and the accuracy curve into the run directory; this prints their paths.
// Plotting is optional: without Python or matplotlib the run says so and is otherwise complete.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "pipetrain/report.hpp"

namespace pt {

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// tools/plot.py of the source tree the binary was built in (build/pipetrain -> ../tools), else
// of the working directory.
std::string find_plot_script() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n > 0) {
    std::string exe(buf.data(), static_cast<size_t>(n));
    const std::string dir = exe.substr(0, exe.find_last_of('/'));
    const std::string p = dir + "/../tools/plot.py";
    if (file_exists(p)) return p;
  }
  return file_exists("tools/plot.py") ? "tools/plot.py" : "";
}

std::string python_interpreter() {
  if (const char* p = std::getenv("PIPETRAIN_PYTHON"); p && *p) return p;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

// Run one plot command; true when it wrote `out`. `why` gets the last line it printed otherwise.
bool run_plot(const std::string& cmd, const std::string& out, std::string& why) {
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    why = "could not start: " + cmd;
    return false;
  }
  std::string text;
  char b[512];
  while (std::fgets(b, sizeof b, p)) text += b;
  const int status = pclose(p);
  if (status == 0 && file_exists(out)) return true;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  why = text.substr(text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1);
  if (why.empty()) why = "exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return false;
}

}  // namespace

void write_run_plots(const std::string& run_dir) {
  bool has_test_accuracy = false;
  {
    std::ifstream m(run_dir + "/metrics.jsonl");
    std::string line;
    while (!has_test_accuracy && std::getline(m, line)) has_test_accuracy = line.find("\"test_accuracy\"") != std::string::npos;
  }
  const std::string script = find_plot_script();
  if (script.empty()) {
    std::printf("plots skipped: tools/plot.py not found beside the binary or in the working directory "
                "(set run.plots = false to silence this)\n");
    return;
  }
  const std::string py = python_interpreter();
  struct Plot {
    std::string what, file, args;
  };
  std::vector<Plot> plots = {{"pipeline timeline (last 4 steps)", run_dir + "/timeline.png",
                              "timeline " + shell_quote(run_dir) + " --last-steps 4"}};
  if (has_test_accuracy)
    plots.push_back({"test accuracy against wall time", run_dir + "/accuracy.png", "accuracy " + shell_quote(run_dir) + " --title " + shell_quote("test accuracy against wall time: " + run_dir)});
  for (const Plot& p : plots) {
    std::string why;
    // bounded: a plot must never hold the job (matplotlib's first import builds a font cache)
    const std::string limit = access("/usr/bin/timeout", X_OK) == 0 ? "/usr/bin/timeout 120 " : "";
    const std::string cmd = limit + shell_quote(py) + " " + shell_quote(script) + " " + p.args + " --out " + shell_quote(p.file);
    if (run_plot(cmd, p.file, why)) {
      std::printf("plot: %s (%s)\n", p.file.c_str(), p.what.c_str());
    } else {
      std::printf("plots skipped: %s %s: %s (plots need python3-matplotlib: make deps, or apt-get install python3-matplotlib; or set run.plots = false)\n",
                  py.c_str(), script.c_str(), why.c_str());
      break;
    }
  }
  std::fflush(stdout);
}

}  // namespace pt
