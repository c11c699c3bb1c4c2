#include "sim/flow_network.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "core/error.h"

namespace moecomm::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Events within this relative distance of t happen at t: rounding in remaining / rate must
// neither leave a sliver of a flow for a later event nor reject a caller's t.
constexpr double kRelEps = 1e-9;
constexpr double kTimeFloor = 1e-6;  // s; keeps the tolerance non-zero around t = 0
// Capacity left after higher priorities below this share of the bandwidth is rounding: it
// would give starved flows absurdly slow rates instead of none.
constexpr double kCapEps = 1e-12;
constexpr double kWeightEps = 1e-12;  // unfrozen weight below this: none left
// A larger completion tolerance would move ends by more than a tenth of their transfer: no
// longer a rounding of the schedule but another schedule.
constexpr double kMaxTolerance = 0.1;

double tolerance(double t) {
  return kRelEps * std::max(std::abs(t), kTimeFloor);
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// Min-heap order for std heaps (max-heaps): smallest share first, ties by id so runs are
// deterministic.
struct Later {
  template <class T>
  bool operator()(const T& a, const T& b) const {
    return a.key() > b.key();
  }
};

}  // namespace

FlowNetwork::FlowNetwork(double completion_tolerance) : eps_(completion_tolerance) {
  if (!(completion_tolerance >= 0 && completion_tolerance <= kMaxTolerance))
    throw Error("flow network", "completion tolerance must be in [0, " + num(kMaxTolerance) +
                                    "], got " + num(completion_tolerance));
}

int FlowNetwork::add_link(double bandwidth_bytes_per_s, double latency_s, std::string name) {
  const std::string where = "flow network: link '" + name + "'";
  if (!(bandwidth_bytes_per_s > 0) || !std::isfinite(bandwidth_bytes_per_s))
    throw Error(where, "bandwidth must be positive and finite, got " + num(bandwidth_bytes_per_s));
  if (!(latency_s >= 0) || !std::isfinite(latency_s))
    throw Error(where, "latency must be >= 0 and finite, got " + num(latency_s));
  Link link;
  link.bandwidth = bandwidth_bytes_per_s;
  link.latency = latency_s;
  link.name = std::move(name);
  link.settled_at = now_;
  links_.push_back(std::move(link));
  return static_cast<int>(links_.size()) - 1;
}

void FlowNetwork::check_path(const std::vector<int>& path) const {
  const std::string where = "flow network: start_flow";
  if (path.empty()) throw Error(where, "empty path");
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] < 0 || path[i] >= num_links())
      throw Error(where, "path[" + std::to_string(i) + "] = " + std::to_string(path[i]) +
                             " is not a link id (" + std::to_string(links_.size()) + " links)");
    for (std::size_t j = 0; j < i; ++j)
      if (path[j] == path[i])
        throw Error(where, "link " + std::to_string(path[i]) + " appears twice in the path");
  }
}

FlowId FlowNetwork::start_flow(const std::vector<int>& path, double bytes, double now,
                               int multiplicity, int priority, double weight) {
  const std::string where = "flow network: start_flow";
  if (!(weight > 0) || !std::isfinite(weight))
    throw Error(where, "weight must be > 0 and finite, got " + num(weight));
  check_path(path);
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw Error(where, "bytes must be >= 0 and finite, got " + num(bytes));
  if (multiplicity < 1)
    throw Error(where, "multiplicity must be >= 1, got " + std::to_string(multiplicity));
  const double next = next_event_time();
  if (!std::isfinite(now) || now < now_ - tolerance(now_) || now > next + tolerance(next))
    throw Error(where, "start time " + num(now) + " is outside [now " + num(now_) +
                           ", next event " + num(next) + "]");
  now_ = std::max(now_, now);
  Flow f;
  double latency = 0;
  for (int l : path) {
    f.hops.push_back({l, -1});
    latency += links_[l].latency;
  }
  f.bytes = f.remaining = bytes;
  f.settled_at = now_;
  f.ready_at = now_ + latency;
  f.multiplicity = multiplicity;
  f.priority = priority;
  f.weight = weight;
  flows_.push_back(std::move(f));
  const FlowId id = static_cast<FlowId>(flows_.size()) - 1;
  queued_.push_back(-1);
  ++active_count_;
  schedule(id, flows_.back().ready_at);
  return id;
}

double FlowNetwork::next_event_time() const {
  return events_.empty() ? kInf : events_.front().time;
}

std::vector<FlowId> FlowNetwork::advance_to(double t) {
  const std::string where = "flow network: advance_to";
  const double next = next_event_time();
  if (!std::isfinite(t) || t < now_ - tolerance(now_))
    throw Error(where, "time " + num(t) + " is not finite or before now " + num(now_));
  if (t > next + tolerance(next))
    throw Error(where, "time " + num(t) + " passes the next event at " + num(next) +
                           "; advance to next_event_time() first");
  now_ = std::max(now_, t);
  std::vector<FlowId> done;
  Batch batch;
  const double due = now_ + tolerance(now_);
  while (!events_.empty()) {
    const Event e = events_.front();
    if (e.time > due && !(batch.ended > 0 && joins_completion(e))) break;
    unschedule(e.flow);
    if (flows_[e.flow].phase == Phase::kLatency)
      begin_transfer(e.flow, batch, done);
    else
      finish(e.flow, batch, done);
  }
  if (!batch.seeds.empty()) recompute(batch);
  return done;
}

// Whether a queued completion ends now with one that did: its projected end lies within eps x
// its transfer time of now, and at most eps of its bytes are left. The bytes bound the work
// taken off its links: a flow that ran slowly and then fast would, by time alone, end with
// much more than eps of its bytes unsent, and free its links early for everyone else.
// Asked in event order, stopping at the first that does not join, so that joining costs only
// the events it takes.
bool FlowNetwork::joins_completion(const Event& e) const {
  const Flow& f = flows_[e.flow];
  return f.phase == Phase::kTransfer && e.time - now_ <= eps_ * (e.time - f.ready_at) &&
         f.remaining - f.rate * (now_ - f.settled_at) <= eps_ * f.bytes;
}

void FlowNetwork::begin_transfer(FlowId id, Batch& batch, std::vector<FlowId>& done) {
  Flow& f = flows_[id];
  if (f.bytes == 0) {
    f.phase = Phase::kDone;
    --active_count_;
    done.push_back(id);
    return;
  }
  f.phase = Phase::kTransfer;
  f.settled_at = now_;
  f.rate = 0;
  for (Hop& hop : f.hops) {
    std::vector<Member>& on_link = links_[hop.link].flows;
    hop.slot = static_cast<int>(on_link.size());
    on_link.push_back({id, 0.0, 0.0, f.priority});
    batch.seeds.push_back(hop.link);
  }
  batch.started = true;
}

void FlowNetwork::finish(FlowId id, Batch& batch, std::vector<FlowId>& done) {
  Flow& f = flows_[id];
  if (batch.ended++ == 0) batch.priority = f.priority;
  batch.mixed = batch.mixed || f.priority != batch.priority;
  batch.level = std::min(batch.level, f.rate / f.weight);
  for (const Hop& hop : f.hops) {  // swap-remove from each link, fixing the moved flow's slot
    std::vector<Member>& on_link = links_[hop.link].flows;
    const FlowId moved = on_link.back().id;
    on_link[hop.slot] = on_link.back();
    on_link.pop_back();
    for (Hop& h : flows_[moved].hops)
      if (h.link == hop.link) h.slot = hop.slot;
    batch.seeds.push_back(hop.link);
  }
  // The links keep f's load until recompute() settles their accounting up to now; what a flow
  // that the tolerance ended early had left counts as carried now.
  const double left = std::max(0.0, f.remaining - f.rate * (now_ - f.settled_at));
  if (left > 0)
    for (const Hop& hop : f.hops) links_[hop.link].bytes += f.multiplicity * left;
  f.remaining = 0;
  f.rate = 0;
  f.settled_at = now_;
  f.phase = Phase::kDone;
  --active_count_;
  done.push_back(id);
  std::vector<Hop>().swap(f.hops);  // finished flows keep only their scalars
}

void FlowNetwork::recompute(const Batch& batch) {
  if (!batch.started && !batch.mixed && batch.level > 0 && refill_above(batch)) return;
  collect_component(batch.seeds);
  for (int l : comp_links_) settle_link(links_[l]);
  fill(comp_flows_, comp_links_, filling_);
  for (int l : comp_links_) links_[l].load = 0;
  for (FlowId id : comp_flows_) {
    const Flow& f = flows_[id];
    const double r = filling_.rate[id];
    apply_rate(id, r);
    for (const Hop& hop : f.hops) links_[hop.link].load += f.multiplicity * r;
  }
}

// Only ends, of one priority p, at lowest share (rate / weight) s: progressive filling
// without the ended flows reaches share s exactly as it did with them (below s their links
// were nobody's bottleneck, and without them their shares only grow), so every flow below s
// keeps its rate and every other one gets at least s. Hence the flows of p at or above s that reach
// the ended flows' links through links they share (others at or above s on every link met) are
// filled again in what the rest leave of those links, and nothing else changes: each flow left out
// keeps a bottleneck none of those flows crosses. Returns false, having changed nothing, when a
// flow below p crosses one of those links (its capacity moves): the component is then filled whole.
bool FlowNetwork::refill_above(const Batch& batch) {
  const double level = batch.level * (1 - kRelEps);  // shares equal within rounding: refilled
  const int priority = batch.priority;
  ++stamp_;
  comp_links_.clear();
  comp_kept_.clear();
  comp_flows_.clear();
  Filling& s = filling_;
  s.cap.resize(links_.size());
  s.count.resize(links_.size());
  s.rate.resize(flows_.size());
  const auto visit_link = [&](int l) {
    if (links_[l].mark == stamp_) return;
    links_[l].mark = stamp_;
    comp_links_.push_back(l);
  };
  for (int l : batch.seeds) visit_link(l);
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    const int l = comp_links_[i];
    double kept = 0;  // load of the flows that keep their rates
    for (const Member& m : links_[l].flows) {
      if (m.priority < priority) return false;
      if (m.priority > priority || m.share < level) {
        kept += m.load;
        continue;
      }
      Flow& f = flows_[m.id];
      if (f.mark == stamp_) continue;
      f.mark = stamp_;
      comp_flows_.push_back(m.id);
      for (const Hop& hop : f.hops) visit_link(hop.link);
    }
    s.cap[l] = std::max(0.0, links_[l].bandwidth - kept);
    comp_kept_.push_back(kept);
  }
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    Link& link = links_[comp_links_[i]];
    settle_link(link);
    link.load = comp_kept_[i];
  }
  // Outside a filling every s.rate is >= 0, so the kept flows count as frozen.
  fill_priority(comp_flows_, 0, comp_flows_.size(), comp_links_, s);
  for (FlowId id : comp_flows_) {
    const Flow& f = flows_[id];
    const double r = s.rate[id];
    apply_rate(id, r);
    for (const Hop& hop : f.hops) links_[hop.link].load += f.multiplicity * r;
  }
  return true;
}

void FlowNetwork::apply_rate(FlowId id, double rate) {
  Flow& f = flows_[id];
  if (rate == f.rate) return;  // unchanged rates keep their progress and their queued event
  f.remaining = std::max(0.0, f.remaining - f.rate * (now_ - f.settled_at));
  f.settled_at = now_;
  f.rate = rate;
  for (const Hop& hop : f.hops) {
    Member& m = links_[hop.link].flows[hop.slot];
    m.share = rate / f.weight;
    m.load = f.multiplicity * rate;
  }
  if (rate > 0) {
    schedule(id, now_ + f.remaining / rate);
  } else {
    unschedule(id);
  }
}

// Links and transferring flows connected to the seeds through shared links: the only rates
// a start or an end can change.
void FlowNetwork::collect_component(const std::vector<int>& seeds) {
  ++stamp_;
  comp_links_.clear();
  comp_flows_.clear();
  const auto visit_link = [&](int l) {
    if (links_[l].mark == stamp_) return;
    links_[l].mark = stamp_;
    comp_links_.push_back(l);
  };
  for (int l : seeds) visit_link(l);
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    for (const Member& m : links_[comp_links_[i]].flows) {
      const FlowId id = m.id;
      Flow& f = flows_[id];
      if (f.mark == stamp_) continue;
      f.mark = stamp_;
      comp_flows_.push_back(id);
      for (const Hop& hop : f.hops) visit_link(hop.link);
    }
  }
}

// Strict priorities: each priority, highest first, is max-min filled into the capacity the
// higher ones left. `links` must hold every link of `flows` and `flows` every transferring
// flow on those links.
void FlowNetwork::fill(const std::vector<FlowId>& flows, const std::vector<int>& links,
                       Filling& s) const {
  s.cap.resize(links_.size());
  s.count.resize(links_.size());
  s.rate.resize(flows_.size());
  for (int l : links) s.cap[l] = links_[l].bandwidth;
  std::vector<FlowId>& order = s.order;
  order.assign(flows.begin(), flows.end());
  const auto higher = [&](FlowId a, FlowId b) { return flows_[a].priority > flows_[b].priority; };
  if (!std::is_sorted(order.begin(), order.end(), higher))
    std::stable_sort(order.begin(), order.end(), higher);
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin;
    while (end < order.size() && flows_[order[end]].priority == flows_[order[begin]].priority)
      ++end;
    fill_priority(order, begin, end, links, s);
    begin = end;
  }
}

// Progressive filling: the link with the smallest fair share is the bottleneck of all its
// unfrozen flows; they freeze at that share, which can only raise the other links' shares
// (they had at least that share), so queued shares stay lower bounds and are refreshed lazily.
void FlowNetwork::fill_priority(const std::vector<FlowId>& flows, std::size_t begin,
                                std::size_t end, const std::vector<int>& links, Filling& s) const {
  for (int l : links) s.count[l] = 0;
  for (std::size_t i = begin; i < end; ++i) {
    s.rate[flows[i]] = -1;
    const Flow& f = flows_[flows[i]];
    for (const Hop& hop : f.hops) s.count[hop.link] += f.multiplicity * f.weight;
  }
  drain(links, s);
  for (int l : links)
    if (s.cap[l] < kCapEps * links_[l].bandwidth) s.cap[l] = 0;
}

// Freezes every flow with s.rate < 0 (all others are >= 0 outside a filling), given the
// capacities and unfrozen counts of `links`.
void FlowNetwork::drain(const std::vector<int>& links, Filling& s) const {
  s.heap.clear();
  for (int l : links)
    if (s.count[l] > kWeightEps) s.heap.push_back({s.cap[l] / s.count[l], l});
  std::make_heap(s.heap.begin(), s.heap.end(), Later());
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), Later());
    const Filling::Candidate c = s.heap.back();
    s.heap.pop_back();
    if (s.count[c.link] <= kWeightEps) continue;  // all its flows froze elsewhere
    const double share = std::max(0.0, s.cap[c.link] / s.count[c.link]);
    // Grown since queued: requeued (instead of updating on every freeze) unless it still
    // comes before every queued lower bound, when it would come straight back out.
    const Filling::Candidate grown{share, c.link};
    if (share > c.share && !s.heap.empty() && grown.key() > s.heap.front().key()) {
      s.heap.push_back(grown);
      std::push_heap(s.heap.begin(), s.heap.end(), Later());
      continue;
    }
    freeze_bottleneck(c.link, share, s);
  }
}

void FlowNetwork::freeze_bottleneck(int link, double share, Filling& s) const {
  for (const Member& m : links_[link].flows) {
    const FlowId id = m.id;
    const Flow& f = flows_[id];
    if (s.rate[id] >= 0) continue;
    s.rate[id] = share * f.weight;  // weighted max-min: a flow gets its weight in shares
    for (const Hop& hop : f.hops) {
      s.cap[hop.link] -= f.multiplicity * f.weight * share;
      s.count[hop.link] -= f.multiplicity * f.weight;
    }
  }
}

void FlowNetwork::settle_link(Link& link) const {
  const double dt = now_ - link.settled_at;
  if (dt > 0) {
    link.bytes += link.load * dt;
    if (link.load > 0) link.busy += dt;
  }
  link.settled_at = now_;
}

void FlowNetwork::schedule(FlowId id, double time) {
  const std::int64_t at = queued_[id];
  if (at < 0) {
    events_.push_back({time, id});
    sift_up(events_.size() - 1);
    return;
  }
  const auto i = static_cast<std::size_t>(at);
  const bool earlier = time < events_[i].time;
  events_[i].time = time;
  if (earlier) {
    sift_up(i);
  } else {
    sift_down(i);
  }
}

// Floyd's removal: the hole the flow leaves sinks along the smaller children to a leaf (one
// comparison a level), where the last event fills it and rises.
void FlowNetwork::unschedule(FlowId id) {
  const std::int64_t at = queued_[id];
  if (at < 0) return;
  queued_[id] = -1;
  const Event last = events_.back();
  events_.pop_back();
  const std::size_t n = events_.size();
  auto hole = static_cast<std::size_t>(at);
  if (hole == n) return;
  for (std::size_t child = 2 * hole + 1; child < n; child = 2 * hole + 1) {
    if (child + 1 < n && events_[child + 1] < events_[child]) ++child;
    place(hole, events_[child]);
    hole = child;
  }
  place(hole, last);
  sift_up(hole);
}

void FlowNetwork::place(std::size_t i, const Event& e) {
  events_[i] = e;
  queued_[e.flow] = static_cast<std::int64_t>(i);
}

void FlowNetwork::sift_down(std::size_t i) {
  const Event e = events_[i];
  const std::size_t n = events_.size();
  for (std::size_t child = 2 * i + 1; child < n; child = 2 * i + 1) {
    if (child + 1 < n && events_[child + 1] < events_[child]) ++child;
    if (!(events_[child] < e)) break;
    place(i, events_[child]);
    i = child;
  }
  place(i, e);
}

void FlowNetwork::sift_up(std::size_t i) {
  const Event e = events_[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!(e < events_[parent])) break;
    place(i, events_[parent]);
    i = parent;
  }
  place(i, e);
}

FlowNetwork::Flow& FlowNetwork::flow_at(FlowId id, const char* where) {
  return const_cast<Flow&>(std::as_const(*this).flow_at(id, where));
}

const FlowNetwork::Flow& FlowNetwork::flow_at(FlowId id, const char* where) const {
  if (id < 0 || id >= static_cast<FlowId>(flows_.size()))
    throw Error(std::string("flow network: ") + where, "unknown flow id " + std::to_string(id));
  return flows_[id];
}

double FlowNetwork::rate(FlowId id) const {
  return flow_at(id, "rate").rate;
}

double FlowNetwork::remaining_bytes(FlowId id) const {
  const Flow& f = flow_at(id, "remaining_bytes");
  return std::max(0.0, f.remaining - f.rate * (now_ - f.settled_at));
}

bool FlowNetwork::active(FlowId id) const {
  return flow_at(id, "active").phase != Phase::kDone;
}

LinkStats FlowNetwork::link_stats(int link) const {
  if (link < 0 || link >= num_links())
    throw Error("flow network: link_stats", "unknown link id " + std::to_string(link));
  Link l = links_[link];
  settle_link(l);
  return {link, l.name, l.bandwidth, l.latency, l.bytes, l.busy};
}

std::vector<LinkStats> FlowNetwork::busiest_links(std::size_t k) const {
  std::vector<LinkStats> all;
  all.reserve(links_.size());
  for (int l = 0; l < num_links(); ++l) all.push_back(link_stats(l));
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<long>(k), all.end(),
                    [](const LinkStats& a, const LinkStats& b) {
                      if (a.busy_time != b.busy_time) return a.busy_time > b.busy_time;
                      if (a.bytes != b.bytes) return a.bytes > b.bytes;
                      return a.id < b.id;
                    });
  all.resize(k);
  return all;
}

double FlowNetwork::recompute_all_for_testing() const {
  std::vector<FlowId> flows;
  for (FlowId id = 0; id < static_cast<FlowId>(flows_.size()); ++id)
    if (flows_[id].phase == Phase::kTransfer) flows.push_back(id);
  std::vector<int> links(links_.size());
  for (int l = 0; l < num_links(); ++l) links[l] = l;
  Filling s;
  fill(flows, links, s);
  double worst = 0;
  for (FlowId id : flows) {
    const double a = flows_[id].rate, b = s.rate[id];
    worst = std::max(worst, std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1.0}));
  }
  return worst;
}

}  // namespace moecomm::sim
