#include "rt/dedup_a2a.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "nn/bf16.h"

namespace moecomm::rt {
namespace {

using sched::A2ADirection;
using sched::Block;
using sched::RoutedTransfer;
using sched::RoutingStep;

// Steps use distinct tags (modulo kStepTags), two per step: the sizes, then the bundles.
constexpr int kDedupTag = 9100;
constexpr size_t kStepTags = 2048;

// A token as the bundles name it: its owner (dispatch: the source member, combine: the
// destination) and its index there. Tokens of different owners never merge.
using TokenKey = int64_t;
TokenKey token_key(int owner, int32_t token) {
  return (int64_t(owner) << 32) | int64_t(uint32_t(token));
}
int32_t token_of(TokenKey k) {
  return int32_t(uint32_t(k & 0xffffffff));
}

// One pair block in a bundle: its rows as positions among the bundle's tokens.
struct Pair {
  Block block;
  std::vector<int32_t> header, index;
  std::vector<float> scalars;
};

// What a message carries: its tokens once, and the pair blocks they stand for.
struct Bundle {
  std::vector<TokenKey> keys;
  std::vector<float> rows;  // [keys, cols]
  std::vector<Pair> pairs;
};

// Builds a bundle token by token: dispatch keeps a token's first row (its copies are equal),
// combine sums them.
class BundleBuilder {
 public:
  BundleBuilder(int64_t cols, bool sum) : cols_(size_t(cols)), sum_(sum) {}
  int32_t add(TokenKey key, const float* row) {
    auto [it, fresh] = at_.emplace(key, int32_t(out_.keys.size()));
    if (fresh) {
      out_.keys.push_back(key);
      out_.rows.insert(out_.rows.end(), row, row + cols_);
    } else if (sum_) {
      float* into = out_.rows.data() + size_t(it->second) * cols_;
      for (size_t c = 0; c < cols_; ++c) into[c] += row[c];
    }
    return it->second;
  }
  // `pairs` of `from`, re-added: each of from's tokens once (its row is a copy or already a
  // sum), wherever many rows point at it.
  void add_pairs(const Bundle& from, const std::vector<const Pair*>& pairs) {
    std::unordered_map<int32_t, int32_t> moved;
    for (const Pair* pair : pairs) {
      Pair p{pair->block, pair->header, {}, pair->scalars};
      p.index.reserve(pair->index.size());
      for (int32_t i : pair->index) {
        auto [it, fresh] = moved.emplace(i, 0);
        if (fresh) it->second = add(from.keys[size_t(i)], from.rows.data() + size_t(i) * cols_);
        p.index.push_back(it->second);
      }
      out_.pairs.push_back(std::move(p));
    }
  }
  Bundle take() { return std::move(out_); }

 private:
  size_t cols_;
  bool sum_;
  Bundle out_;
  std::unordered_map<TokenKey, int32_t> at_;
};

// --- the wire: [keys, pairs] keys rows, then per pair [src, dst, header, rows, scalars] and
// its header, index and scalars.

template <typename T>
void put(std::vector<std::byte>& out, const T* data, size_t n) {
  const size_t at = out.size();
  out.resize(at + n * sizeof(T));
  if (n) std::memcpy(out.data() + at, data, n * sizeof(T));
}

// bf16: the rows travel as bfloat16 (a2a_dtype=bf16; already rounded, so exactly).
std::vector<std::byte> serialize(const Bundle& b, bool bf16) {
  std::vector<std::byte> out;
  const int64_t head[2] = {int64_t(b.keys.size()), int64_t(b.pairs.size())};
  put(out, head, 2);
  put(out, b.keys.data(), b.keys.size());
  if (bf16) {
    std::vector<uint16_t> half(b.rows.size());
    for (size_t i = 0; i < half.size(); ++i) half[i] = nn::to_bf16(b.rows[i]);
    put(out, half.data(), half.size());
  } else {
    put(out, b.rows.data(), b.rows.size());
  }
  for (const Pair& p : b.pairs) {
    const int64_t ph[5] = {p.block.first, p.block.second, int64_t(p.header.size()),
                           int64_t(p.index.size()), int64_t(p.scalars.size())};
    put(out, ph, 5);
    put(out, p.header.data(), p.header.size());
    put(out, p.index.data(), p.index.size());
    put(out, p.scalars.data(), p.scalars.size());
  }
  return out;
}

class Reader {
 public:
  Reader(const std::vector<std::byte>& data, std::string what) : d_(data), what_(std::move(what)) {}
  template <typename T>
  std::vector<T> take(int64_t n) {
    if (n < 0 || size_t(n) > (d_.size() - at_) / sizeof(T)) fail();
    std::vector<T> out(static_cast<size_t>(n));
    if (n) std::memcpy(out.data(), d_.data() + at_, size_t(n) * sizeof(T));
    at_ += size_t(n) * sizeof(T);
    return out;
  }
  bool done() const { return at_ == d_.size(); }
  [[noreturn]] void fail() const { throw Error(what_, "a malformed a2a=dedup message"); }

 private:
  const std::vector<std::byte>& d_;
  std::string what_;
  size_t at_ = 0;
};

Bundle deserialize(const std::vector<std::byte>& data, int64_t cols, int members, bool bf16,
                   const std::string& what) {
  Reader r(data, what);
  const std::vector<int64_t> head = r.take<int64_t>(2);
  Bundle b;
  b.keys = r.take<TokenKey>(head[0]);
  if (bf16) {
    const std::vector<uint16_t> half = r.take<uint16_t>(head[0] * cols);
    b.rows.resize(half.size());
    for (size_t i = 0; i < half.size(); ++i) b.rows[i] = nn::from_bf16(half[i]);
  } else {
    b.rows = r.take<float>(head[0] * cols);
  }
  for (int64_t k = 0; k < head[1]; ++k) {
    const std::vector<int64_t> ph = r.take<int64_t>(5);
    if (ph[0] < 0 || ph[0] >= members || ph[1] < 0 || ph[1] >= members) r.fail();
    Pair p{{int(ph[0]), int(ph[1])},
           r.take<int32_t>(ph[2]),
           r.take<int32_t>(ph[3]),
           r.take<float>(ph[4])};
    for (int32_t i : p.index)
      if (i < 0 || size_t(i) >= b.keys.size()) r.fail();
    b.pairs.push_back(std::move(p));
  }
  if (!r.done()) r.fail();
  return b;
}

// --- the plan's steps

class DedupRun {
 public:
  DedupRun(const Comm& comm, const KeyedRows& send, const sched::A2ARouting& plan,
           const CallOptions& options)
      : comm_(comm),
        plan_(plan),
        options_(options),
        cols_(send.cols),
        bf16_(send.bf16),
        row_bytes_(send.cols * int64_t(send.bf16 ? sizeof(uint16_t) : sizeof(float))) {
    check(send);
    const int n = comm.size(), me = comm.rank();
    sent_.rows.assign(size_t(n), 0);
    sent_.meta_bytes.assign(size_t(n), 0);
    int64_t at = 0;
    for (int j = 0; j < n; ++j) {
      const Block block{me, j};
      BundleBuilder b(cols_, reduce());
      Pair p{
          block, send.headers.empty() ? std::vector<int32_t>{} : send.headers[size_t(j)], {}, {}};
      for (int64_t r = at; r < at + send.counts[size_t(j)]; ++r) {
        p.index.push_back(
            b.add(token_key(owner(block), send.keys[size_t(r)]), send.rows.data() + r * cols_));
        if (!send.scalars.empty()) p.scalars.push_back(send.scalars[size_t(r)]);
      }
      Bundle one = b.take();
      one.pairs.push_back(std::move(p));
      if (bf16_)  // as the wire rounds them, the rows this member keeps too
        for (float& x : one.rows) x = nn::from_bf16(nn::to_bf16(x));
      if (j == me && options.bytes)  // stays on the device: its rows once per token
        options.bytes->add(comm.my_global_rank(), comm.my_global_rank(),
                           int64_t(one.keys.size()) * row_bytes_, options.ranks_per_node);
      store_.emplace(block, std::move(one));
      at += send.counts[size_t(j)];
    }
  }

  void run() {
    for (size_t s = 0; s < plan_.steps.size(); ++s) step(plan_.steps[s], s);
  }

  // Dispatch: the pair blocks for this member, expanded, by source.
  KeyedRows expanded() {
    const int n = comm_.size(), me = comm_.rank();
    KeyedRows out;
    out.cols = cols_;
    for (int s = 0; s < n; ++s) {
      const auto it = store_.find({s, me});
      if (it == store_.end())
        throw std::logic_error("a2a=dedup lost the block from member " + std::to_string(s));
      const Bundle& b = it->second;
      const Pair& p = b.pairs.at(0);
      for (int32_t i : p.index) {
        out.rows.insert(out.rows.end(), b.rows.begin() + i * cols_,
                        b.rows.begin() + (i + 1) * cols_);
        out.keys.push_back(token_of(b.keys[size_t(i)]));
      }
      out.scalars.insert(out.scalars.end(), p.scalars.begin(), p.scalars.end());
      out.counts.push_back(int64_t(p.index.size()));
      out.headers.push_back(p.header);
    }
    out.sent = sent_;
    return out;
  }

  // Combine: every bundle that ended here, summed per token.
  ReducedRows reduced(int64_t tokens) {
    const int n = comm_.size(), me = comm_.rank();
    for (auto& [block, b] : store_) {
      if (block.second != me)
        throw std::logic_error("a2a=dedup left the block (" + std::to_string(block.first) + ", " +
                               std::to_string(block.second) + ") undelivered");
      final_.push_back(std::move(b));
    }
    ReducedRows out;
    out.sums.assign(size_t(tokens * cols_), 0.0f);
    std::vector<const Pair*> by_source(size_t(n), nullptr);
    for (const Bundle& b : final_) {
      for (size_t k = 0; k < b.keys.size(); ++k) {
        const int32_t t = token_of(b.keys[k]);
        if (t < 0 || t >= tokens) continue;  // a padding row
        float* into = out.sums.data() + t * cols_;
        const float* row = b.rows.data() + k * size_t(cols_);
        for (int64_t c = 0; c < cols_; ++c) into[c] += row[c];
      }
      for (const Pair& p : b.pairs) by_source[size_t(p.block.first)] = &p;
    }
    for (int s = 0; s < n; ++s) {
      if (!by_source[size_t(s)])
        throw std::logic_error("a2a=dedup lost the block from member " + std::to_string(s));
      const Pair& p = *by_source[size_t(s)];
      out.scalars.insert(out.scalars.end(), p.scalars.begin(), p.scalars.end());
      out.counts.push_back(int64_t(p.index.size()));
    }
    out.sent = sent_;
    return out;
  }

 private:
  bool reduce() const { return plan_.direction == A2ADirection::kCombine; }
  int owner(Block b) const { return reduce() ? b.second : b.first; }

  void check(const KeyedRows& send) const {
    const int n = comm_.size();
    const std::string& what = options_.label;
    if (send.counts.size() != size_t(n))
      throw Error(what, "a2a=dedup needs " + std::to_string(n) + " block counts, got " +
                            std::to_string(send.counts.size()));
    const int64_t rows = std::accumulate(send.counts.begin(), send.counts.end(), int64_t{0});
    if (send.rows.size() != size_t(rows * send.cols) || send.keys.size() != size_t(rows) ||
        (!send.scalars.empty() && send.scalars.size() != size_t(rows)) ||
        (!send.headers.empty() && send.headers.size() != size_t(n)))
      throw Error(what, "a2a=dedup's rows, keys, scalars and headers disagree with its counts (" +
                            std::to_string(rows) + " rows)");
    if (plan_.members != n)
      throw Error(what, "a2a=dedup's plan has " + std::to_string(plan_.members) +
                            " members, the group " + std::to_string(n));
  }

  Bundle take(Block block) {
    const auto it = store_.find(block);
    if (it == store_.end())
      throw std::logic_error("a2a=dedup: member " + std::to_string(comm_.rank()) +
                             " does not hold the block (" + std::to_string(block.first) + ", " +
                             std::to_string(block.second) + ")");
    Bundle b = std::move(it->second);
    store_.erase(it);
    return b;
  }

  // A transfer's bundle: its pair blocks and the pairs its node blocks stand for.
  Bundle outgoing(const RoutedTransfer& t) {
    std::vector<Block> pairs = t.blocks;
    for (const Block& nb : t.node_blocks)
      for (const Block& p : plan_.node_block_pairs(nb)) pairs.push_back(p);
    BundleBuilder b(cols_, reduce());
    for (const Block& p : pairs) {
      const Bundle held = take(p);
      std::vector<const Pair*> all;
      for (const Pair& pair : held.pairs) all.push_back(&pair);
      b.add_pairs(held, all);
    }
    return b.take();
  }

  // Dispatch: a bundle splits into its pair blocks, each with its own tokens. Combine: a
  // bundle whose pairs end here is summed at the end; one on its way splits by pair (its pairs
  // then name distinct destinations, whose tokens never merged).
  void incoming(Bundle b) {
    const int me = comm_.rank();
    const bool here = std::all_of(b.pairs.begin(), b.pairs.end(),
                                  [&](const Pair& p) { return p.block.second == me; });
    if (reduce() && here && b.pairs.size() > 1) {
      final_.push_back(std::move(b));
      return;
    }
    for (const Pair& p : b.pairs) {
      BundleBuilder one(cols_, reduce());
      one.add_pairs(b, {&p});
      if (reduce() && b.pairs.size() > 1)
        for (const Pair& q : b.pairs)
          if (&q != &p && q.block.second == p.block.second)
            throw std::logic_error("a2a=dedup: a combine bundle on its way mixes two pairs");
      if (!store_.emplace(p.block, one.take()).second)
        throw std::logic_error("a2a=dedup: member " + std::to_string(me) + " received the block (" +
                               std::to_string(p.block.first) + ", " +
                               std::to_string(p.block.second) + ") twice");
    }
  }

  void step(const RoutingStep& step, size_t index) {
    const int me = comm_.rank();
    const int tag = kDedupTag + 2 * int(index % kStepTags);
    const std::string what = "a2a=dedup step " + std::to_string(index);
    std::vector<std::vector<std::byte>> out;
    std::vector<int64_t> out_size, in_size;
    std::vector<const RoutedTransfer*> to, from;
    for (const RoutedTransfer& t : step) {
      if (t.from == me) {
        const Bundle b = outgoing(t);
        out.push_back(serialize(b, bf16_));
        out_size.push_back(int64_t(out.back().size()));
        to.push_back(&t);
        const int64_t rows = int64_t(b.keys.size());
        sent_.rows[size_t(t.to)] += rows;
        sent_.meta_bytes[size_t(t.to)] +=
            int64_t(sizeof(int64_t)) + out_size.back() - rows * row_bytes_;
      } else if (t.to == me) {
        from.push_back(&t);
      }
    }
    in_size.resize(from.size());
    std::vector<MPI_Request> reqs;
    auto post = [&](bool send, void* data, int64_t count, MPI_Datatype type, int peer, int tg) {
      if (count > INT_MAX) throw Error(options_.label, "an a2a=dedup message exceeds 2 GiB");
      reqs.emplace_back();
      check_mpi(send ? MPI_Isend(data, int(count), type, peer, tg, comm_.handle(), &reqs.back())
                     : MPI_Irecv(data, int(count), type, peer, tg, comm_.handle(), &reqs.back()),
                send ? "MPI_Isend" : "MPI_Irecv");
    };
    for (size_t k = 0; k < from.size(); ++k)
      post(false, &in_size[k], 1, MPI_INT64_T, from[k]->from, tag);
    for (size_t k = 0; k < to.size(); ++k) post(true, &out_size[k], 1, MPI_INT64_T, to[k]->to, tag);
    wait_all(reqs, comm_, what + " sizes", options_);
    reqs.clear();
    std::vector<std::vector<std::byte>> in(from.size());
    for (size_t k = 0; k < from.size(); ++k) {
      in[k].resize(size_t(in_size[k]));
      post(false, in[k].data(), in_size[k], MPI_BYTE, from[k]->from, tag + 1);
    }
    for (size_t k = 0; k < to.size(); ++k) {
      post(true, out[k].data(), out_size[k], MPI_BYTE, to[k]->to, tag + 1);
      if (options_.bytes)
        options_.bytes->add(comm_.my_global_rank(), comm_.global_rank(to[k]->to),
                            int64_t(sizeof(int64_t)) + out_size[k], options_.ranks_per_node);
    }
    wait_all(reqs, comm_, what, options_);
    for (size_t k = 0; k < from.size(); ++k)
      incoming(deserialize(
          in[k], cols_, comm_.size(), bf16_,
          options_.label + ": " + what + " from member " + std::to_string(from[k]->from)));
  }

  const Comm& comm_;
  const sched::A2ARouting& plan_;
  const CallOptions& options_;
  int64_t cols_;
  bool bf16_;
  int64_t row_bytes_;  // a row on the wire
  std::map<Block, Bundle> store_;
  DedupSent sent_;
  std::vector<Bundle> final_;
};

void check_direction(const sched::A2ARouting& plan, A2ADirection want, const CallOptions& o) {
  if (plan.direction != want)
    throw Error(o.label, std::string("a2a=dedup's ") +
                             (want == A2ADirection::kDispatch ? "dispatch" : "combine") +
                             " needs the plan of its direction");
}

}  // namespace

KeyedRows dedup_broadcast(const Comm& comm, const KeyedRows& send, const sched::A2ARouting& plan,
                          const CallOptions& options) {
  check_direction(plan, A2ADirection::kDispatch, options);
  DedupRun run(comm, send, plan, options);
  run.run();
  return run.expanded();
}

ReducedRows dedup_reduce(const Comm& comm, const KeyedRows& send, int64_t tokens,
                         const sched::A2ARouting& plan, const CallOptions& options) {
  check_direction(plan, A2ADirection::kCombine, options);
  DedupRun run(comm, send, plan, options);
  run.run();
  return run.reduced(tokens);
}

}  // namespace moecomm::rt
