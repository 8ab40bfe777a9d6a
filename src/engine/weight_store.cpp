// WeightStore: versions of a stage's flat parameters in a pool sized from the IR. fp32: every
// held version is an fp32 buffer of the pool. bf16 (engine.hpp): the pool is the one fp32
// master of the latest version, the other held versions are packed bf16 stashes, and compute
// reads the bf16 copy of a version from one compute buffer that remembers which version it
// holds. Both modes count held versions, readers and ids the same way.
#include <algorithm>
#include <limits>

#include "pipetrain/error.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

WeightStore::Sizes WeightStore::sizes(size_t n, bool bf16, int versions) {
  Sizes z;
  const int64_t N = static_cast<int64_t>(n);
  z.latest = N;
  z.per_other = bf16 ? (N + 1) / 2 : N;
  z.others = std::max(0, versions - 1);
  z.compute = bf16 ? N : 0;
  z.compute_packed = bf16 ? (N + 1) / 2 : 0;
  return z;
}

WeightStore::WeightStore(Backend& be, size_t n, bool bf16) : be_(be), n_(n), bf16_(bf16) {
  const Sizes z = sizes(n, bf16, 1);
  pool_.emplace_back(be, static_cast<size_t>(z.latest));
  id_.push_back(0);
  if (bf16_) compute_ = Buffer(be, static_cast<size_t>(z.compute)), compute_packed_ = Buffer(be, static_cast<size_t>(z.compute_packed));
}

void WeightStore::prepare(const Schedule& ir, int rank, int stage, size_t from) {
  if (from == 0) {
    base_ = latest_id_;
    PT_CHECK(held() == 1, "an IR must start with one live version, have " << held());
  }
  reserve(ir, rank, stage);
  uses_.clear();
  const auto& acts = ir.workers[static_cast<size_t>(rank)];
  for (size_t i = from; i < acts.size(); ++i)
    if (acts[i].stage == stage && is_compute(acts[i].op)) ++uses_[acts[i].version];
}

void WeightStore::reserve(const Schedule& ir, int rank, int stage) {
  const int need = max_versions_held(ir, rank, stage);
  const Sizes z = sizes(n_, bf16_, need);
  if (bf16_) {  // one master, need - 1 packed stashes
    while (static_cast<int64_t>(packed_.size()) < z.others) {
      packed_.emplace_back(be_, static_cast<size_t>(z.per_other));
      packed_id_.push_back(-1);
    }
  } else {
    while (static_cast<int64_t>(pool_.size()) < 1 + z.others) {  // allocated once, before the first step of the IR
      pool_.emplace_back(be_, static_cast<size_t>(z.per_other));
      id_.push_back(-1);
    }
  }
}

void WeightStore::restore(const std::vector<std::pair<int64_t, std::vector<float>>>& versions, int64_t latest,
                          int64_t base) {
  const size_t fp32_slots = bf16_ ? 1 : versions.size();
  while (pool_.size() < fp32_slots) {
    pool_.emplace_back(be_, n_);
    id_.push_back(-1);
  }
  while (bf16_ && packed_.size() + 1 < versions.size()) {
    packed_.emplace_back(be_, (n_ + 1) / 2);
    packed_id_.push_back(-1);
  }
  for (auto& v : id_) v = -1;
  for (auto& v : packed_id_) v = -1;
  compute_id_ = -1;
  bool have_latest = false;
  size_t next_fp32 = 0, next_packed = 0;
  for (const auto& [id, values] : versions) {
    PT_CHECK(values.size() == n_, "restored version " << id << " has " << values.size() << " floats, stage has " << n_);
    if (bf16_ && id != latest) {  // a stash: its bf16 values (exact), packed through the compute buffer
      be_.from_host(compute_.data(), values.data(), n_);
      be_.round_bf16(n_, compute_.data(), compute_.data());
      be_.pack_bf16(n_, compute_.data(), packed_[next_packed].data());
      packed_id_[next_packed++] = id;
      continue;
    }
    const size_t slot = bf16_ ? 0 : next_fp32++;
    be_.from_host(pool_[slot].data(), values.data(), n_);
    id_[slot] = id;
    if (id == latest) latest_slot_ = static_cast<int>(slot), have_latest = true;
  }
  PT_CHECK(have_latest, "restored versions lack the latest " << latest);
  if (bf16_) poison_operand_only();  // the compute buffer was the stashes' scratch
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

int WeightStore::packed_slot_of(int64_t abs) const {
  for (size_t i = 0; i < packed_id_.size(); ++i)
    if (packed_id_[i] == abs) return static_cast<int>(i);
  return -1;
}

namespace {
// Ids of the bf16 arrays handed out, unique in the process (CView::version): a new one each
// time a compute copy is made, so nothing derived from an array's earlier values is reused.
uint64_t next_array_version() {
  static uint64_t v = 0;
  return ++v;
}
}  // namespace

// The bf16 copy of version abs in the compute buffer: kept if it is there already, else
// rounded from the master (the latest; its bf16 array packed beside it) or unpacked from its
// stash (which is then its bf16 array: a stash is only rewritten after the compute buffer
// moves on to the latest, stash_latest, or by restore, which resets compute_id_).
ParamView WeightStore::compute_copy(int64_t abs) {
  if (compute_id_ != abs) {
    compute_bf16_ = compute_packed_.data();
    if (abs == latest_id_) {
      make_compute(0, n_);
    } else {
      const int p = packed_slot_of(abs);
      PT_CHECK(p >= 0, "weight version " << abs << " is not held (latest " << latest_id_ << ")");
      compute_bf16_ = packed_[static_cast<size_t>(p)].data();
      unpack_compute(compute_bf16_);
    }
    compute_version_ = next_array_version();
    compute_id_ = abs;
  }
  return ParamView(compute_.data(), compute_bf16_, compute_version_);
}

ParamView WeightStore::read(int32_t rel) {
  if (bf16_) return compute_copy(base_ + rel);
  const int s = slot_of(rel);
  PT_CHECK(s >= 0, "weight version " << base_ + rel << " is not held (latest " << latest_id_ << ")");
  return pool_[static_cast<size_t>(s)].data();
}

ParamView WeightStore::read_latest() { return bf16_ ? compute_copy(latest_id_) : ParamView(latest()); }

void WeightStore::done_reading(int32_t rel) {
  auto it = uses_.find(rel);
  PT_CHECK(it != uses_.end() && it->second > 0, "version " << base_ + rel << " read more often than the IR says");
  if (--it->second != 0 || base_ + rel == latest_id_) return;
  if (bf16_) packed_id_[static_cast<size_t>(packed_slot_of(base_ + rel))] = -1;
  else id_[static_cast<size_t>(slot_of(rel))] = -1;
}

// bf16: the latest version is still read after the coming update, so its bf16 copy goes to
// a free stash (the compute buffer then holds that copy, so a read of it unpacks nothing).
void WeightStore::stash_latest() {
  const int free = packed_slot_of(-1);
  PT_CHECK(free >= 0, "weight pool of " << packed_.size() << " stashes exhausted stashing version " << latest_id_);
  compute_copy(latest_id_);
  be_.copy(packed_[static_cast<size_t>(free)].data(), compute_packed_.data(), (n_ + 1) / 2);
  packed_id_[static_cast<size_t>(free)] = latest_id_;
}

float* WeightStore::begin_update(int32_t rel) {
  const int64_t abs = base_ + rel;
  auto it = uses_.find(static_cast<int32_t>(latest_id_ - base_));
  const bool still_read = it != uses_.end() && it->second > 0;
  if (bf16_) {  // the master always becomes the new latest, updated in place
    if (still_read) stash_latest();
    else if (compute_id_ == latest_id_) compute_id_ = -1;
    id_[static_cast<size_t>(latest_slot_)] = abs;
  } else if (!still_read) {  // nobody reads the latest again: update it in place
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
  rounded_ = 0;
  return pool_[static_cast<size_t>(latest_slot_)].data();
}

// The ranges come in order, so the first one (offset 0) starts a new compute copy: whatever
// version the buffer held is gone from then on (a stash is unpacked again when read).
void WeightStore::updated_range(size_t offset, size_t count) {
  if (!bf16_ || count == 0) return;
  PT_CHECK(offset == rounded_ && offset % 2 == 0, "updated_range(" << offset << ", " << count << ") after " << rounded_);
  if (offset == 0) compute_id_ = -1;
  make_compute(offset, count);
  rounded_ += count;
  if (rounded_ < n_) return;
  compute_bf16_ = compute_packed_.data();
  compute_version_ = next_array_version();
  compute_id_ = latest_id_;
}

namespace {
// element k of a packed bf16 array (k even: a whole word)
template <class F>
F* bf16_element(F* packed, size_t k) {
  return packed + k / 2;
}
}  // namespace

void WeightStore::set_operand_only(std::vector<std::pair<int64_t, int64_t>> ranges) {
  if (!bf16_) return;
  std::sort(ranges.begin(), ranges.end());
  operand_only_.clear();
  for (const auto& [lo, count] : ranges) {
    PT_CHECK(lo >= 0 && count >= 0 && lo % 2 == 0 && count % 2 == 0 && lo + count <= static_cast<int64_t>(n_),
             "operand-only range {" << lo << ", " << count << "} of " << n_ << " parameters (even ends within)");
    if (!operand_only_.empty() && lo <= operand_only_.back().first + operand_only_.back().second)
      operand_only_.back().second = std::max(operand_only_.back().second, lo + count - operand_only_.back().first);
    else if (count > 0)
      operand_only_.emplace_back(lo, count);
  }
  poison_operand_only();
  compute_id_ = -1;
}

void WeightStore::poison_operand_only() {
  for (const auto& [lo, count] : operand_only_)
    be_.fill(compute_.data() + lo, std::numeric_limits<float>::quiet_NaN(), static_cast<size_t>(count));
}

void WeightStore::make_compute(size_t offset, size_t count) {
  const auto part = [&](size_t lo, size_t hi, bool operand_only) {
    if (hi <= lo) return;
    float* packed = bf16_element(compute_packed_.data(), lo);
    if (operand_only) be_.pack_bf16(hi - lo, latest() + lo, packed);
    else be_.round_pack_bf16(hi - lo, latest() + lo, compute_.data() + lo, packed);
  };
  const size_t end = offset + count;
  size_t at = offset;
  for (const auto& [lo, n] : operand_only_) {
    const size_t a = std::max(at, static_cast<size_t>(lo)), b = std::min(end, static_cast<size_t>(lo + n));
    if (a >= b) continue;
    part(at, a, false), part(a, b, true);
    at = b;
  }
  part(at, end, false);
}

void WeightStore::unpack_compute(const float* stash) {
  const auto part = [&](size_t lo, size_t hi) {
    if (hi > lo) be_.unpack_bf16(hi - lo, bf16_element(stash, lo), compute_.data() + lo);
  };
  size_t at = 0;
  for (const auto& [lo, n] : operand_only_) part(at, static_cast<size_t>(lo)), at = static_cast<size_t>(lo + n);
  part(at, n_);
}

int WeightStore::held() const {
  int h = 0;
  for (auto v : id_) h += v >= 0;
  for (auto v : packed_id_) h += v >= 0;
  return h;
}

int64_t WeightStore::bytes() const {
  int64_t b = static_cast<int64_t>(compute_.bytes() + compute_packed_.bytes());
  for (const Buffer& x : pool_) b += static_cast<int64_t>(x.bytes());
  for (const Buffer& x : packed_) b += static_cast<int64_t>(x.bytes());
  return b;
}

std::vector<std::pair<int64_t, std::vector<float>>> WeightStore::host_versions() const {
  std::vector<std::pair<int64_t, std::vector<float>>> out;
  for (size_t i = 0; i < id_.size(); ++i)
    if (id_[i] >= 0) {
      out.emplace_back(id_[i], std::vector<float>(n_));
      be_.to_host(out.back().second.data(), pool_[i].data(), n_);
    }
  Buffer unpacked(be_, n_ && !packed_.empty() ? n_ : 0);
  for (size_t i = 0; i < packed_id_.size(); ++i)
    if (packed_id_[i] >= 0) {
      be_.unpack_bf16(n_, packed_[i].data(), unpacked.data());
      out.emplace_back(packed_id_[i], std::vector<float>(n_));
      be_.to_host(out.back().second.data(), unpacked.data(), n_);
    }
  return out;
}

}  // namespace pt
