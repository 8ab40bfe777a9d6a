// Errors: one exception type carrying a documented exit code, and the CHECK macros
// that build "file:line: what, with the values" messages.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace pt {

// Documented process exit codes (docs/ARCHITECTURE.md, "Exit codes").
enum class Exit : int {
  ok = 0,
  internal = 1,     // a bug: an invariant of pipetrain itself failed
  bad_input = 2,    // deck, command line, layout, data file or checkpoint contents
  io = 3,           // a file could not be read or written (errno given)
  numerical = 4,    // non-finite loss or gradient under train.nonfinite = "abort"
  timeout = 5,      // a message or collective missed run.comm_timeout_s
  no_checkpoint = 6 // --resume found no valid committed checkpoint
};

const char* exit_name(Exit e);

class Error : public std::runtime_error {
 public:
  // collective: every rank raises the same error at the same point (deck errors),
  // so it is printed once and all ranks exit normally instead of aborting the job.
  Error(Exit code, const std::string& what, bool collective = false)
      : std::runtime_error(what), code_(code), collective_(collective) {}
  Exit code() const { return code_; }
  bool collective() const { return collective_; }

 private:
  Exit code_;
  bool collective_;
};

[[noreturn]] void fail(Exit code, const std::string& what, bool collective = false);

}  // namespace pt

// Build a message from stream pieces: PT_MSG("got " << x << ", want " << y)
#define PT_MSG(stream_expr) \
  (static_cast<std::ostringstream&&>(std::ostringstream() << stream_expr).str())

// An invariant of pipetrain: failure is a bug, reported with the source location.
#define PT_CHECK(cond, stream_expr)                                                      \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::pt::fail(::pt::Exit::internal,                                                   \
                 PT_MSG(__FILE__ << ":" << __LINE__ << ": check '" #cond "' failed: "    \
                                 << stream_expr));                                       \
  } while (0)

// A condition on user input or the environment: failure carries its own exit code.
#define PT_REQUIRE(cond, code, stream_expr)              \
  do {                                                   \
    if (!(cond)) ::pt::fail((code), PT_MSG(stream_expr)); \
  } while (0)
