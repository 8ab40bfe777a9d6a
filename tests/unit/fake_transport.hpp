// A Transport for tests (transport.hpp) without MPI: the ranks of a pipeline are threads of
// one process sharing a FakeNetwork, a mailbox keyed by (source, destination, tag) where
// the first send posted meets the first receive posted (MPI's non-overtaking order). A
// message is copied from the sender's buffer into the receiver's when both sides have
// posted, so a send stays pending, and its buffer is read, until its receive is posted (as
// under MPI's rendezvous protocol): a buffer reused before its send completed delivers its
// new contents, which the bitwise comparisons of the tests catch.
// Sizes must match. Allreduces of a stage's gradients are of one replica (the sum is the
// buffer itself); host allreduces of doubles (the gradient norm's sums) are collectives of
// every rank run_ranks started: the k-th posted by each rank meet, and when the last one
// arrives the sums, added in rank order, are written to every buffer. When a rank fails,
// every other rank's next post() or test() throws instead of waiting for its deadline, and a
// failing rank's transport withdraws its unmatched posts as it is destroyed while unwinding
// (before the buffers they name), so no peer copies into freed memory.
// run_ranks runs one body per rank in its own thread and rethrows the first failure.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pipetrain/error.hpp"
#include "pipetrain/transport.hpp"

namespace pt::test {

class FakeNetwork {
 public:
  // Messages delivered so far, and those posted on one side only.
  int64_t delivered() {
    std::lock_guard<std::mutex> g(mu_);
    return delivered_;
  }
  size_t unmatched() {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (auto* box : {&sends_, &recvs_})
      for (auto& [key, q] : *box) n += q.size();
    for (auto& [k, c] : colls_) n += c.size();
    return n;
  }
  void set_ranks(int ranks) {
    std::lock_guard<std::mutex> g(mu_);
    ranks_ = ranks;
  }
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    if (!failed_) why_ = why;
    failed_ = true;
  }

 private:
  friend class FakeTransport;
  using Key = std::tuple<int, int, int>;  // source, destination, tag
  struct Post {
    const float* src = nullptr;  // a send's buffer
    float* dst = nullptr;        // a receive's buffer
    size_t n = 0;
    uint64_t token = 0;
  };

  // A send (dst null) or a receive (src null) posted on `key`: delivered now if the other
  // side is waiting, else queued. Returns its token.
  uint64_t post(const Key& key, const float* src, float* dst, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    if (failed_) fail_here();
    const uint64_t token = next_++;
    auto& other = (src ? recvs_ : sends_)[key];
    if (other.empty()) {
      (src ? sends_ : recvs_)[key].push_back({src, dst, n, token});
      return token;
    }
    const Post peer = other.front();
    other.pop_front();
    const size_t want = src ? peer.n : n, have = src ? n : peer.n;
    if (want != have) {
      failed_ = true;
      why_ = "message of " + std::to_string(have) + " floats for a receive of " + std::to_string(want) + " (tag " +
             std::to_string(std::get<2>(key)) + ")";
    } else {
      std::memcpy(src ? peer.dst : dst, src ? src : peer.src, n * sizeof(float));
    }
    done_.insert(token), done_.insert(peer.token);
    ++delivered_;
    return token;
  }
  // rank's next host allreduce of n doubles in buf; returns its token
  uint64_t allreduce(int rank, double* buf, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t token = next_++;
    std::vector<Coll>& c = colls_[coll_posted_[rank]++];
    c.push_back({rank, buf, n, token});
    if (static_cast<int>(c.size()) < ranks_) return token;
    std::sort(c.begin(), c.end(), [](const Coll& a, const Coll& b) { return a.rank < b.rank; });
    std::vector<double> sum(n, 0.0);
    for (const Coll& x : c) {
      if (x.n != n) failed_ = true, why_ = "host allreduces of different sizes";
      for (size_t i = 0; i < n && x.n == n; ++i) sum[i] += x.buf[i];
    }
    for (const Coll& x : c) {
      if (x.n == n) std::memcpy(x.buf, sum.data(), n * sizeof(double));
      done_.insert(x.token);
    }
    colls_.erase(coll_posted_[rank] - 1);
    return token;
  }
  bool test(uint64_t token) {
    std::lock_guard<std::mutex> g(mu_);
    if (failed_) fail_here();
    return done_.erase(token) > 0;
  }
  void cancel(uint64_t token) {
    std::lock_guard<std::mutex> g(mu_);
    if (done_.erase(token)) return;  // already matched: complete
    for (auto& [key, q] : recvs_)
      for (auto it = q.begin(); it != q.end(); ++it)
        if (it->token == token) {
          q.erase(it);
          return;
        }
  }
  // Drop every unmatched post of `rank` (its transport is going away with its buffers); if
  // any was still waiting, the run cannot finish: the network fails.
  void withdraw(int rank) {
    std::lock_guard<std::mutex> g(mu_);
    bool pending = false;
    for (auto* box : {&sends_, &recvs_})
      for (auto& [key, q] : *box) {
        const int mine = box == &sends_ ? std::get<0>(key) : std::get<1>(key);
        if (mine != rank || q.empty()) continue;
        pending = true;
        q.clear();
      }
    if (pending && !failed_) why_ = "rank " + std::to_string(rank) + " ended with messages still posted";
    failed_ = failed_ || pending;
  }
  [[noreturn]] void fail_here() { ::pt::fail(Exit::internal, "fake network: another rank failed: " + why_); }

  struct Coll {
    int rank;
    double* buf;
    size_t n;
    uint64_t token;
  };
  std::mutex mu_;
  std::map<Key, std::deque<Post>> sends_, recvs_;
  std::map<int64_t, std::vector<Coll>> colls_;  // k -> the k-th host allreduce of the ranks posted so far
  std::map<int, int64_t> coll_posted_;          // rank -> host allreduces it posted
  int ranks_ = 1;
  std::set<uint64_t> done_;
  uint64_t next_ = 1;
  int64_t delivered_ = 0;
  bool failed_ = false;
  std::string why_;
};

class FakeTransport final : public Transport {
 public:
  FakeTransport(FakeNetwork& net, int rank) : net_(net), rank_(rank) {}
  // Unwinding from a failure: withdraw this rank's posts before its buffers go (a normal end
  // leaves them for the tests' unmatched() check).
  ~FakeTransport() override {
    if (std::uncaught_exceptions() > 0) net_.withdraw(rank_);
  }
  std::string describe() const override { return "fake (threads of one process)"; }
  void isend(const float* buf, size_t n, int peer, int tag, MPI_Comm, Request* req) override {
    req->set_token(net_.post({rank_, peer, tag}, buf, nullptr, n));
  }
  void irecv(float* buf, size_t n, int peer, int tag, MPI_Comm, Request* req) override {
    req->set_token(net_.post({peer, rank_, tag}, nullptr, buf, n));
  }
  void iallreduce(float*, size_t, MPI_Comm, Request*) override {}  // one replica: nothing to sum
  void isend_host(const float* buf, size_t n, int peer, int tag, MPI_Comm, Request* req) override {
    req->set_token(net_.post({rank_, peer, kHost + tag}, buf, nullptr, n));
  }
  void irecv_host(float* buf, size_t n, int peer, int tag, MPI_Comm, Request* req) override {
    req->set_token(net_.post({peer, rank_, kHost + tag}, nullptr, buf, n));
  }
  void iallreduce_host(double* buf, size_t n, MPI_Comm, Request* req) override { req->set_token(net_.allreduce(rank_, buf, n)); }
  bool test(Request* req) override {
    if (!req->pending()) return true;
    if (!net_.test(req->token())) return false;
    req->set_token(0);
    return true;
  }
  void cancel(Request* req) override {
    if (!req->pending()) return;
    net_.cancel(req->token());
    req->set_token(0);
  }

 private:
  static constexpr int kHost = 1 << 30;  // host messages travel apart from the pipeline's
  FakeNetwork& net_;
  int rank_;
};

// body(rank) for every rank, each in its own thread; a failing rank fails the network (so
// the others stop) and the first failure by rank is rethrown here.
inline void run_ranks(FakeNetwork& net, int ranks, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  net.set_ranks(ranks);
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        net.fail("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : threads) t.join();
  // a rank that failed on its own comes before those stopped by the fake network
  for (int pass = 0; pass < 2; ++pass)
    for (auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        if (pass == 1 || std::string(x.what()).find("another rank failed") == std::string::npos) throw;
      }
    }
}

}  // namespace pt::test
