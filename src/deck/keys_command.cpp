// `pipetrain keys`: every deck key with type, default, range and meaning.
#include <cstdio>

#include "pipetrain/commands.hpp"
#include "pipetrain/deck.hpp"

namespace pt {

int cmd_keys(bool markdown) {
  if (markdown) {
    std::printf("%s", deck_reference_markdown().c_str());
    return 0;
  }
  for (const KeyDoc& k : deck_key_docs())
    std::printf("%-26s %-28s default %-36s %s\n", k.key.c_str(), k.type.c_str(), k.default_value.c_str(), k.doc.c_str());
  return 0;
}

}  // namespace pt
