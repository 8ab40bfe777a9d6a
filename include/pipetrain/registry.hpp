// A registry of named entries filled at static initialisation (one entry per variant, as
// LAMMPS's style factories): the schedule registry (schedule_registry.hpp) and the layer registry
// (layers.hpp) are both this. Entries are kept sorted by name; a name registered twice is
// an internal error at start-up.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "pipetrain/error.hpp"

namespace pt {

template <class Entry>
class NamedRegistry {
 public:
  static NamedRegistry& instance() {
    static NamedRegistry r;  // constructed on first use: safe from any static initialiser
    return r;
  }
  bool add(Entry e, const char* what) {
    PT_CHECK(!e.name.empty(), what << " registered without a name");
    PT_CHECK(!entries_.count(e.name), what << " '" << e.name << "' registered twice");
    std::string name = e.name;
    entries_.emplace(std::move(name), std::move(e));
    return true;
  }
  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  std::vector<const Entry*> all() const {
    std::vector<const Entry*> out;
    for (auto& [name, e] : entries_) out.push_back(&e);
    return out;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& [name, e] : entries_) out.push_back(name);
    return out;
  }

 private:
  std::map<std::string, Entry> entries_;
};

}  // namespace pt
