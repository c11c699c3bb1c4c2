#pragma once
// Flow-level network of the simulator (DESIGN.md "One schedule, three executors"): links with a
// bandwidth and a latency, flows over paths of links. Transferring flows share links max-min
// fairly (progressive filling) within a priority; priorities are strict. When flows start,
// the connected component of links and flows around them is filled again, so independent
// traffic (other nodes, other datacenters) costs nothing; when flows end, only the flows at
// or above the ended ones' fair share around them are (the ones below cannot change).
//
// Usage by an event loop: start flows at the current time, then repeatedly
//   t = next_event_time(); for (FlowId f : advance_to(t)) ...;
// Progress is lazy (bytes left are kept per flow at the time its rate last changed), so
// advancing costs only the events it processes.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace moecomm::sim {

using FlowId = std::int64_t;

struct LinkStats {
  int id = 0;
  std::string name;
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // s
  double bytes = 0;      // bytes carried so far (a flow of multiplicity m counts m times)
  double busy_time = 0;  // s during which at least one flow moved bytes over the link
};

class FlowNetwork {
 public:
  // completion_tolerance (eps): when a flow completes, the flows next in line to complete
  // whose projected end lies within eps x their transfer time (from the end of their latency)
  // and which have at most eps of their bytes left complete with it, those last bytes counted
  // on their links at once. An uneven all-to-all ends one flow at a time, each end refilling
  // the rates around it; eps joins the near-simultaneous ends into one refill. A flow then
  // ends at most eps x its transfer time early. 0 (default): exact times. Throws
  // moecomm::Error outside [0, 0.1].
  explicit FlowNetwork(double completion_tolerance = 0);

  // Throws moecomm::Error unless bandwidth > 0 and latency >= 0 (both finite).
  int add_link(double bandwidth_bytes_per_s, double latency_s, std::string name);

  // A flow of `bytes` per member over `path` (link ids, no link twice), started at `now`:
  // it waits the sum of its links' latencies, then transfers at its max-min fair rate.
  // Multiplicity m: m identical flows on the same path, counted m times on every link and
  // finishing together (link bytes grow by m x bytes). Higher priority is served first.
  // `now` must lie in [now(), next_event_time()]. Zero bytes completes after the latency.
  // Throws moecomm::Error on an empty path, an unknown or repeated link, negative or
  // non-finite bytes, multiplicity < 1 or a bad `now`.
  // Weight (> 0): within a priority, rates are weighted max-min fair: on a bottleneck each
  // member gets weight x the fair share (1 for every flow: plain max-min).
  FlowId start_flow(const std::vector<int>& path, double bytes, double now, int multiplicity = 1,
                    int priority = 0, double weight = 1.0);

  double completion_tolerance() const { return eps_; }
  double now() const { return now_; }
  // Earliest latency expiry or completion; +inf when nothing is pending.
  double next_event_time() const;
  // Moves time to t and returns the flows completed by t (in event order). t must lie in
  // [now(), next_event_time()] up to a relative epsilon, otherwise moecomm::Error: events in
  // between would be skipped. Events within the epsilon of t are processed at t, and so are
  // the completions that the completion tolerance joins to a completion at t.
  std::vector<FlowId> advance_to(double t);

  // Per-member rate in bytes/s (0 while waiting for the latency, after completion, or when
  // higher-priority flows take the whole link).
  double rate(FlowId id) const;
  double remaining_bytes(FlowId id) const;  // per member, as of now()
  bool active(FlowId id) const;             // started and not completed
  std::size_t active_flows() const { return active_count_; }

  int num_links() const { return static_cast<int>(links_.size()); }
  LinkStats link_stats(int link) const;  // accounting up to now()
  // The k links with the longest busy time (ties: more bytes first).
  std::vector<LinkStats> busiest_links(std::size_t k) const;

  // Recomputes every rate from scratch (ignoring components) and returns the largest
  // relative difference to the incrementally maintained rates; changes nothing.
  double recompute_all_for_testing() const;

 private:
  enum class Phase : std::uint8_t { kLatency, kTransfer, kDone };
  struct Hop {
    int link;
    int slot;  // position of the flow in links_[link].flows while transferring
  };
  struct Flow {
    std::vector<Hop> hops;
    double bytes = 0;       // per member
    double remaining = 0;   // per member, as of settled_at
    double rate = 0;        // per member
    double settled_at = 0;  // time of the last rate change
    double ready_at = 0;    // end of the latency wait
    int multiplicity = 1;
    int priority = 0;
    double weight = 1.0;  // per member
    Phase phase = Phase::kLatency;
    std::uint64_t mark = 0;  // component search stamp
  };
  // A transferring flow on a link, with copies of what a refill reads of it (apply_rate keeps
  // them current), so that scanning a link reads one array in order.
  struct Member {
    FlowId id;
    double share;  // rate / weight
    double load;   // multiplicity x rate
    int priority;
  };
  struct Link {
    double bandwidth = 0;
    double latency = 0;
    std::string name;
    std::vector<Member> flows;  // transferring flows crossing the link
    double load = 0;            // sum of multiplicity x rate over flows, bytes/s
    double bytes = 0;           // accounting up to settled_at
    double busy = 0;
    double settled_at = 0;
    std::uint64_t mark = 0;
  };
  // A flow's one pending event: the end of its latency, or its projected completion.
  struct Event {
    double time;
    FlowId flow;
    bool operator<(const Event& o) const {  // ties: lower flow id first, so runs are repeatable
      return time != o.time ? time < o.time : flow < o.flow;
    }
  };
  // What one advance_to changed: the links whose flows started or ended, and, for the ends,
  // their priority (mixed: several) and their lowest share, which bound the rates they can
  // change (refill_above).
  struct Batch {
    std::vector<int> seeds;
    bool started = false;
    int ended = 0;
    int priority = 0;
    bool mixed = false;
    double level = std::numeric_limits<double>::infinity();
  };
  // Scratch of one progressive filling; per-link and per-flow arrays indexed by id.
  struct Filling {
    std::vector<double> cap;    // capacity left for the current priority
    std::vector<double> count;  // unfrozen members x weight of the current priority
    // New per-member rate by flow id; < 0 while unfrozen in the filling under way.
    std::vector<double> rate;
    struct Candidate {  // share is a lower bound: shares only grow while filling
      double share;
      int link;
      std::pair<double, int> key() const { return {share, link}; }
    };
    std::vector<Candidate> heap;
    std::vector<FlowId> order;  // flows by decreasing priority
  };

  Flow& flow_at(FlowId id, const char* where);
  const Flow& flow_at(FlowId id, const char* where) const;
  void check_path(const std::vector<int>& path) const;
  bool joins_completion(const Event& e) const;
  void begin_transfer(FlowId id, Batch& batch, std::vector<FlowId>& done);
  void finish(FlowId id, Batch& batch, std::vector<FlowId>& done);
  void apply_rate(FlowId id, double rate);
  void recompute(const Batch& batch);
  bool refill_above(const Batch& batch);
  void collect_component(const std::vector<int>& seeds);
  void fill(const std::vector<FlowId>& flows, const std::vector<int>& links, Filling& s) const;
  void fill_priority(const std::vector<FlowId>& flows, std::size_t begin, std::size_t end,
                     const std::vector<int>& links, Filling& s) const;
  void drain(const std::vector<int>& links, Filling& s) const;
  void freeze_bottleneck(int link, double share, Filling& s) const;
  void settle_link(Link& link) const;  // accounting up to now_
  // The event queue is a binary min-heap that knows each flow's position, so a rate change
  // moves the flow's one event instead of queueing another (a refill changes hundreds).
  void schedule(FlowId id, double time);
  void unschedule(FlowId id);
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);
  void place(std::size_t i, const Event& e);

  std::vector<Link> links_;
  std::vector<Flow> flows_;
  std::vector<Event> events_;  // min-heap on time (ties: lower flow id)
  // Per flow: position of its event in events_, -1 when none. Apart from the flows, which a
  // heap operation would otherwise touch at every level.
  std::vector<std::int64_t> queued_;
  std::size_t active_count_ = 0;
  double now_ = 0;
  double eps_ = 0;
  std::uint64_t stamp_ = 0;
  // Reused buffers of recompute().
  std::vector<int> comp_links_;
  std::vector<double> comp_kept_;  // per comp_links_ entry: load of the flows not refilled
  std::vector<FlowId> comp_flows_;
  Filling filling_;
};

}  // namespace moecomm::sim
