// Internal to src/deck: the deck's own keys, declared once with the members they fill
// (schema.cpp): the parser, the effective deck and docs/DECK.md all walk these lists.
#pragma once
#include <string>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/keys.hpp"

namespace pt {

// Every section key, named "section.key", grouped by section in the order docs list them.
const std::vector<Key<Deck>>& deck_schema();
// The keys of one [[cluster.levels]] table.
const std::vector<Key<ClusterLevel>>& cluster_level_keys();
// The sections a deck may have, in order.
const std::vector<std::string>& deck_sections();

}  // namespace pt
