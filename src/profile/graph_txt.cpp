// PipeDream graph.txt profiles -> a chain Profile (placeholder until the converter lands).
#include "pipetrain/error.hpp"
#include "pipetrain/profile.hpp"

namespace pt {

Profile parse_graph_txt(const std::string&, const std::string& path) {
  fail(Exit::bad_input, path + ": graph.txt profiles are not supported yet", true);
}

}  // namespace pt
