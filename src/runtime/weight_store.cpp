// WeightStore: versions of a stage's flat parameters in a pool sized from the IR.
#include "pipetrain/runtime.hpp"

#include "pipetrain/error.hpp"

namespace pt {

WeightStore::WeightStore(Backend& be, size_t n) : be_(be), n_(n) {
  pool_.emplace_back(be, n);
  id_.push_back(0);
}

void WeightStore::prepare(const Schedule& ir, int rank, int stage, size_t from) {
  if (from == 0) {
    base_ = latest_id_;
    PT_CHECK(held() == 1, "an IR must start with one live version, have " << held());
  }
  const size_t need = static_cast<size_t>(max_versions_held(ir, rank, stage));
  while (pool_.size() < need) {  // allocated once, before the first step of the IR
    pool_.emplace_back(be_, n_);
    id_.push_back(-1);
  }
  uses_.clear();
  const auto& acts = ir.workers[static_cast<size_t>(rank)];
  for (size_t i = from; i < acts.size(); ++i)
    if (acts[i].stage == stage && is_compute(acts[i].op)) ++uses_[acts[i].version];
}

void WeightStore::restore(const std::vector<std::pair<int64_t, std::vector<float>>>& versions, int64_t latest,
                          int64_t base) {
  while (pool_.size() < versions.size()) {
    pool_.emplace_back(be_, n_);
    id_.push_back(-1);
  }
  for (auto& v : id_) v = -1;
  bool have_latest = false;
  for (size_t i = 0; i < versions.size(); ++i) {
    PT_CHECK(versions[i].second.size() == n_, "restored version " << versions[i].first << " has " << versions[i].second.size()
                                                                   << " floats, stage has " << n_);
    be_.from_host(pool_[i].data(), versions[i].second.data(), n_);
    id_[i] = versions[i].first;
    if (versions[i].first == latest) latest_slot_ = static_cast<int>(i), have_latest = true;
  }
  PT_CHECK(have_latest, "restored versions lack the latest " << latest);
  latest_id_ = latest;
  base_ = base;
  max_held_ = std::max(max_held_, held());
}

int WeightStore::slot_of(int32_t rel) const {
  const int64_t abs = base_ + rel;
  for (size_t i = 0; i < id_.size(); ++i)
    if (id_[i] == abs) return static_cast<int>(i);
  return -1;
}

const float* WeightStore::read(int32_t rel) const {
  const int s = slot_of(rel);
  PT_CHECK(s >= 0, "weight version " << base_ + rel << " is not held (latest " << latest_id_ << ")");
  return pool_[static_cast<size_t>(s)].data();
}

void WeightStore::done_reading(int32_t rel) {
  auto it = uses_.find(rel);
  PT_CHECK(it != uses_.end() && it->second > 0, "version " << base_ + rel << " read more often than the IR says");
  if (--it->second == 0 && base_ + rel != latest_id_) id_[static_cast<size_t>(slot_of(rel))] = -1;
}

float* WeightStore::begin_update(int32_t rel) {
  const int64_t abs = base_ + rel;
  auto it = uses_.find(static_cast<int32_t>(latest_id_ - base_));
  const bool still_read = it != uses_.end() && it->second > 0;
  if (!still_read) {  // nobody reads the latest again: update it in place
    id_[static_cast<size_t>(latest_slot_)] = abs;
  } else {  // stash: keep the latest for its readers, update a copy
    int free = -1;
    for (size_t i = 0; i < id_.size(); ++i)
      if (id_[i] < 0) { free = static_cast<int>(i); break; }
    PT_CHECK(free >= 0, "weight pool of " << pool_.size() << " exhausted creating version " << abs);
    be_.copy(pool_[static_cast<size_t>(free)].data(), pool_[static_cast<size_t>(latest_slot_)].data(), n_);
    id_[static_cast<size_t>(free)] = abs;
    latest_slot_ = free;
  }
  latest_id_ = abs;
  max_held_ = std::max(max_held_, held());
  return pool_[static_cast<size_t>(latest_slot_)].data();
}

int WeightStore::held() const {
  int h = 0;
  for (auto v : id_) h += v >= 0;
  return h;
}

std::vector<std::pair<int64_t, const float*>> WeightStore::live() const {
  std::vector<std::pair<int64_t, const float*>> out;
  for (size_t i = 0; i < id_.size(); ++i)
    if (id_[i] >= 0) out.emplace_back(id_[i], pool_[i].data());
  return out;
}

}  // namespace pt
