// Exit-code names and the throwing helper behind the CHECK macros.
#include "pipetrain/error.hpp"

namespace pt {

const char* exit_name(Exit e) {
  switch (e) {
    case Exit::ok: return "ok";
    case Exit::internal: return "internal error";
    case Exit::bad_input: return "bad input";
    case Exit::io: return "I/O error";
    case Exit::numerical: return "numerical error";
    case Exit::timeout: return "communication timeout";
    case Exit::no_checkpoint: return "no valid checkpoint";
  }
  return "unknown";
}

void fail(Exit code, const std::string& what, bool collective) { throw Error(code, what, collective); }

}  // namespace pt
