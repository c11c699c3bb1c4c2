#include "sim/flow_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "core/parallel_config.h"
#include "core/topology.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"
#include "support/expect_error.h"

namespace moecomm::sim {
namespace {

// Hand-computed answers are exact up to rounding of the last bits.
#define EXPECT_CLOSE(a, b) EXPECT_NEAR((a), (b), 1e-12 * std::max(1.0, std::abs(b)))

// Runs the network until nothing is active; returns each flow's completion time.
std::map<FlowId, double> run_to_end(FlowNetwork& net) {
  std::map<FlowId, double> end;
  for (int step = 0; net.active_flows() > 0 && step < 100000; ++step) {
    const double t = net.next_event_time();
    if (!std::isfinite(t)) break;
    for (FlowId id : net.advance_to(t)) end[id] = t;
  }
  EXPECT_EQ(net.active_flows(), 0u);
  return end;
}

TEST(FlowNetwork, OneFlowTakesLatencyPlusBytesOverBandwidth) {
  FlowNetwork net;
  const int l = net.add_link(25e9, 10e-6, "node0.up");
  const FlowId f = net.start_flow({l}, 100e6, 0.0);
  EXPECT_TRUE(net.active(f));
  EXPECT_CLOSE(net.next_event_time(), 10e-6);  // latency expiry
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(f), 10e-6 + 100e6 / 25e9);
  EXPECT_FALSE(net.active(f));
  const LinkStats s = net.link_stats(l);
  EXPECT_EQ(s.name, "node0.up");
  EXPECT_CLOSE(s.bytes, 100e6);
  EXPECT_CLOSE(s.busy_time, 100e6 / 25e9);  // the latency wait is not busy time
}

TEST(FlowNetwork, TwoFlowsOnOneLinkShareItAndFinishTogether) {
  FlowNetwork net;
  const int l = net.add_link(100, 0, "l");
  const FlowId a = net.start_flow({l}, 100, 0.0);
  const FlowId b = net.start_flow({l}, 100, 0.0);
  net.advance_to(net.next_event_time());
  EXPECT_CLOSE(net.rate(a), 50.0);
  EXPECT_CLOSE(net.rate(b), 50.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(a), 2.0);
  EXPECT_CLOSE(end.at(b), 2.0);
}

// Weighted max-min: weights 1 and 3 split a link 1:3; a weight-1/4 flow of multiplicity 4
// weighs as much as one plain flow (the simulator's per-collective fairness).
TEST(FlowNetwork, WeightsSplitALinkInProportion) {
  FlowNetwork net;
  const int l = net.add_link(100, 0, "l");
  const FlowId a = net.start_flow({l}, 100, 0.0, 1, 0, 1.0);
  const FlowId b = net.start_flow({l}, 300, 0.0, 1, 0, 3.0);
  net.advance_to(net.next_event_time());
  EXPECT_CLOSE(net.rate(a), 25.0);
  EXPECT_CLOSE(net.rate(b), 75.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(a), 4.0);
  EXPECT_CLOSE(end.at(b), 4.0);
  FlowNetwork group;
  const int g = group.add_link(100, 0, "g");
  const FlowId many = group.start_flow({g}, 10, 0.0, 4, 0, 0.25);
  const FlowId one = group.start_flow({g}, 50, 0.0);
  group.advance_to(group.next_event_time());
  EXPECT_CLOSE(group.rate(many) * 4, 50.0);  // the group of 4 together: half the link
  EXPECT_CLOSE(group.rate(one), 50.0);
  EXPECT_THROW(group.start_flow({g}, 1, group.now(), 1, 0, 0.0), moecomm::Error);
}

TEST(FlowNetwork, ShortFlowEndsAndLongOneSpeedsUp) {
  FlowNetwork net;
  const int l = net.add_link(100, 0, "l");
  const FlowId shorter = net.start_flow({l}, 100, 0.0);
  const FlowId longer = net.start_flow({l}, 300, 0.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(shorter), 2.0);  // 100 bytes at 50 B/s
  EXPECT_CLOSE(end.at(longer), 4.0);   // 200 bytes left at 100 B/s
  EXPECT_CLOSE(net.link_stats(l).bytes, 400.0);
  EXPECT_CLOSE(net.link_stats(l).busy_time, 4.0);
}

TEST(FlowNetwork, LateStartSharesFromItsStart) {
  FlowNetwork net;
  const int l = net.add_link(100, 0, "l");
  const FlowId a = net.start_flow({l}, 300, 0.0);
  net.advance_to(0.0);
  net.advance_to(1.0);  // no event before 3: only time moves
  EXPECT_CLOSE(net.remaining_bytes(a), 200.0);
  const FlowId b = net.start_flow({l}, 50, 1.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(b), 2.0);  // 50 bytes at 50 B/s
  EXPECT_CLOSE(end.at(a), 3.5);  // 150 left at 2, then 100 B/s
}

TEST(FlowNetwork, PathIsLimitedByItsSlowestLink) {
  FlowNetwork net;
  const int fast = net.add_link(100, 1e-3, "fast");
  const int slow = net.add_link(40, 2e-3, "slow");
  const FlowId f = net.start_flow({fast, slow}, 400, 0.0);
  net.advance_to(net.next_event_time());
  EXPECT_CLOSE(net.rate(f), 40.0);
  EXPECT_CLOSE(run_to_end(net).at(f), 3e-3 + 10.0);
}

TEST(FlowNetwork, ClassicMaxMinExample) {
  // L1 (12 B/s) carries f0, f2, f4: it is the bottleneck at 4 each. Then f1 takes the 6 left
  // on L0 (10 B/s) and f3 the 26 left on L2 (30 B/s).
  FlowNetwork net;
  const int l0 = net.add_link(10, 0, "L0");
  const int l1 = net.add_link(12, 0, "L1");
  const int l2 = net.add_link(30, 0, "L2");
  const std::vector<std::vector<int>> paths = {{l0, l1}, {l0}, {l1, l2}, {l2}, {l1}};
  std::vector<FlowId> ids;
  for (const auto& p : paths) ids.push_back(net.start_flow(p, 1000, 0.0));
  net.advance_to(0.0);
  const std::vector<double> want = {4, 6, 4, 26, 4};
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_CLOSE(net.rate(ids[i]), want[i]) << i;
  EXPECT_EQ(net.recompute_all_for_testing(), 0.0);
}

TEST(FlowNetwork, MultiplicityEqualsSeparateFlows) {
  // 3 members of 30 bytes and one flow of 90 on 10 B/s: 2.5 B/s each until 12, then the
  // single flow has 60 bytes left at 10 B/s.
  FlowNetwork grouped;
  const int g = grouped.add_link(10, 0.5, "g");
  const FlowId group = grouped.start_flow({g}, 30, 0.0, 3);
  const FlowId single = grouped.start_flow({g}, 90, 0.0);
  auto grouped_end = run_to_end(grouped);

  FlowNetwork separate;
  const int s = separate.add_link(10, 0.5, "s");
  std::vector<FlowId> members;
  for (int i = 0; i < 3; ++i) members.push_back(separate.start_flow({s}, 30, 0.0));
  const FlowId alone = separate.start_flow({s}, 90, 0.0);
  auto separate_end = run_to_end(separate);

  EXPECT_CLOSE(grouped_end.at(group), 0.5 + 12.0);
  EXPECT_CLOSE(grouped_end.at(single), 0.5 + 18.0);
  for (FlowId m : members) EXPECT_CLOSE(separate_end.at(m), grouped_end.at(group));
  EXPECT_CLOSE(separate_end.at(alone), grouped_end.at(single));
  EXPECT_CLOSE(grouped.link_stats(g).bytes, 180.0);  // members count on the link
}

TEST(FlowNetwork, ZeroBytesCompleteAfterTheLatency) {
  FlowNetwork net;
  const int a = net.add_link(10, 1e-3, "a");
  const int b = net.add_link(10, 2e-3, "b");
  const FlowId f = net.start_flow({a, b}, 0, 1.0);
  EXPECT_CLOSE(run_to_end(net).at(f), 1.0 + 3e-3);
  EXPECT_EQ(net.link_stats(a).bytes, 0.0);
}

TEST(FlowNetwork, HighPriorityFinishesAsIfAlone) {
  FlowNetwork net;
  const int l = net.add_link(100, 0, "l");
  const FlowId low = net.start_flow({l}, 300, 0.0, 1, 0);
  const FlowId high = net.start_flow({l}, 100, 0.0, 1, 1);
  net.advance_to(0.0);
  EXPECT_CLOSE(net.rate(high), 100.0);
  EXPECT_EQ(net.rate(low), 0.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(high), 1.0);
  EXPECT_CLOSE(end.at(low), 4.0);  // nothing until 1, then the whole link
}

TEST(FlowNetwork, LowPriorityTakesWhatHighLeaves) {
  // The high flow is held to 50 by its second link; the low one gets the other 50 of L0.
  FlowNetwork net;
  const int l0 = net.add_link(100, 0, "L0");
  const int l1 = net.add_link(50, 0, "L1");
  const FlowId high = net.start_flow({l0, l1}, 100, 0.0, 1, 2);
  const FlowId low = net.start_flow({l0}, 150, 0.0, 1, 0);
  net.advance_to(0.0);
  EXPECT_CLOSE(net.rate(high), 50.0);
  EXPECT_CLOSE(net.rate(low), 50.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(high), 2.0);
  EXPECT_CLOSE(end.at(low), 2.5);  // 50 left at 2, then 100 B/s
}

TEST(FlowNetwork, BusiestLinksAreOrderedByBusyTime) {
  FlowNetwork net;
  const int a = net.add_link(100, 0, "a");
  const int b = net.add_link(10, 0, "b");
  const int c = net.add_link(100, 0, "c");
  net.start_flow({a}, 100, 0.0);
  net.start_flow({b}, 100, 0.0);
  run_to_end(net);
  const auto top = net.busiest_links(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, b);
  EXPECT_CLOSE(top[0].busy_time, 10.0);
  EXPECT_EQ(top[1].id, a);
  EXPECT_EQ(net.busiest_links(10).size(), 3u);
  EXPECT_EQ(net.link_stats(c).busy_time, 0.0);
}

TEST(FlowNetwork, BadArgumentsAreClearErrors) {
  FlowNetwork net;
  EXPECT_ERROR_HAS(net.add_link(0, 0, "x"), "link 'x'", "bandwidth must be positive");
  EXPECT_ERROR_HAS(net.add_link(-1, 0, "x"), "bandwidth");
  EXPECT_ERROR_HAS(net.add_link(1, -1, "y"), "link 'y'", "latency");
  const int l = net.add_link(10, 0, "l");
  EXPECT_ERROR_HAS(net.start_flow({}, 1, 0), "start_flow", "empty path");
  EXPECT_ERROR_HAS(net.start_flow({l, 5}, 1, 0), "path[1] = 5 is not a link id");
  EXPECT_ERROR_HAS(net.start_flow({-1}, 1, 0), "not a link id");
  EXPECT_ERROR_HAS(net.start_flow({l, l}, 1, 0), "appears twice");
  EXPECT_ERROR_HAS(net.start_flow({l}, -1, 0), "bytes must be >= 0");
  EXPECT_ERROR_HAS(net.start_flow({l}, NAN, 0), "bytes");
  EXPECT_ERROR_HAS(net.start_flow({l}, 1, 0, 0), "multiplicity must be >= 1");
  EXPECT_ERROR_HAS(net.rate(7), "unknown flow id 7");
  EXPECT_ERROR_HAS(net.active(-1), "unknown flow id");
  EXPECT_ERROR_HAS(net.link_stats(3), "unknown link id 3");
  net.start_flow({l}, 10, 0);
  net.advance_to(0.0);  // finishes at 1
  EXPECT_ERROR_HAS(net.advance_to(2.0), "passes the next event at 1");
  EXPECT_ERROR_HAS(net.start_flow({l}, 1, 1.5), "start time 1.5 is outside");
  net.advance_to(0.5);
  EXPECT_ERROR_HAS(net.advance_to(0.25), "before now 0.5");
  EXPECT_ERROR_HAS(net.start_flow({l}, 1, 0.25), "outside");
}

// ---- random scenarios: incremental rates against an independent from-scratch reference ----

struct Spec {
  std::vector<int> path;
  int multiplicity;
  int priority;
  double ready;  // start + path latency
  double bytes;
  double weight = 1;
};

// Plain progressive filling over every transferring flow, priority by priority, freezing
// all flows of the minimum-share link in each round (weighted: a flow takes weight shares):
// quadratic, but obviously right.
std::vector<double> reference_rates(const std::vector<double>& bandwidth,
                                    const std::vector<Spec>& specs,
                                    const std::vector<bool>& transferring) {
  std::vector<double> cap = bandwidth, rate(specs.size(), 0.0);
  std::vector<int> priorities;
  for (std::size_t f = 0; f < specs.size(); ++f)
    if (transferring[f]) priorities.push_back(specs[f].priority);
  std::sort(priorities.rbegin(), priorities.rend());
  priorities.erase(std::unique(priorities.begin(), priorities.end()), priorities.end());
  for (int p : priorities) {
    std::vector<bool> open(specs.size());
    for (std::size_t f = 0; f < specs.size(); ++f)
      open[f] = transferring[f] && specs[f].priority == p;
    while (std::count(open.begin(), open.end(), true) > 0) {
      std::vector<double> count(cap.size(), 0.0);
      for (std::size_t f = 0; f < specs.size(); ++f)
        if (open[f])
          for (int l : specs[f].path) count[l] += specs[f].multiplicity * specs[f].weight;
      int best = -1;
      for (std::size_t l = 0; l < cap.size(); ++l)
        if (count[l] > 0 && (best < 0 || cap[l] / count[l] < cap[best] / count[best]))
          best = static_cast<int>(l);
      const double share = std::max(0.0, cap[best] / count[best]);
      for (std::size_t f = 0; f < specs.size(); ++f) {
        if (!open[f] ||
            std::find(specs[f].path.begin(), specs[f].path.end(), best) == specs[f].path.end())
          continue;
        open[f] = false;
        rate[f] = share * specs[f].weight;
        for (int l : specs[f].path) cap[l] -= specs[f].multiplicity * rate[f];
      }
    }
    for (std::size_t l = 0; l < cap.size(); ++l)
      if (cap[l] < 1e-12 * bandwidth[l]) cap[l] = 0;
  }
  return rate;
}

void check_against_reference(const FlowNetwork& net, const std::vector<double>& bandwidth,
                             const std::vector<Spec>& specs) {
  // A latency that ends within the network's rounding tolerance of now has ended.
  const double ready_by = net.now() + 1e-9 * std::max(net.now(), 1e-6);
  std::vector<bool> transferring(specs.size());
  for (std::size_t f = 0; f < specs.size(); ++f)
    transferring[f] =
        net.active(static_cast<FlowId>(f)) && specs[f].ready <= ready_by && specs[f].bytes > 0;
  const std::vector<double> want = reference_rates(bandwidth, specs, transferring);
  for (std::size_t f = 0; f < specs.size(); ++f)
    EXPECT_NEAR(net.rate(static_cast<FlowId>(f)), want[f], 1e-9 * std::max(1.0, want[f]))
        << "flow " << f << " at " << net.now();
  EXPECT_LT(net.recompute_all_for_testing(), 1e-9);
}

struct Scenario {
  int priorities = 3;
  bool weighted = false;
  double tolerance = 0;  // the network's completion tolerance
};

// Flows start at random times between events on random paths and run to their ends; after
// every event the rates must equal the reference's, and in the end every byte must have
// crossed each link of its path once (flows the tolerance ends early included).
void run_random_scenario(int seed, const Scenario& scenario) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(scenario.priorities) +
               " priorities, " + (scenario.weighted ? "weighted" : "unweighted") + ", tolerance " +
               std::to_string(scenario.tolerance));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  FlowNetwork net(scenario.tolerance);
  std::vector<double> bandwidth;
  const int links = 4 + seed % 9;
  for (int l = 0; l < links; ++l) {
    bandwidth.push_back(1 + 9 * unit(rng));
    net.add_link(bandwidth.back(), unit(rng) < 0.5 ? 0.0 : 0.3 * unit(rng), "l");
  }
  std::vector<Spec> specs;
  const int flows = 40;
  while (specs.size() < static_cast<std::size_t>(flows) || net.active_flows() > 0) {
    const double next = net.next_event_time();
    if (specs.size() < static_cast<std::size_t>(flows) && unit(rng) < 0.5) {
      const double start =
          std::isfinite(next) ? net.now() + (next - net.now()) * unit(rng) : net.now() + unit(rng);
      Spec s;
      std::vector<int> all(links);
      for (int l = 0; l < links; ++l) all[l] = l;
      std::shuffle(all.begin(), all.end(), rng);
      s.path.assign(all.begin(), all.begin() + 1 + static_cast<int>(rng() % 3));
      s.multiplicity = 1 + static_cast<int>(rng() % 3);
      s.priority = static_cast<int>(rng() % scenario.priorities);
      s.bytes = unit(rng) < 0.1 ? 0.0 : 20 * unit(rng);
      if (scenario.weighted) s.weight = 0.25 + 2 * unit(rng);
      net.start_flow(s.path, s.bytes, start, s.multiplicity, s.priority, s.weight);
      double latency = 0;
      for (int l : s.path) latency += net.link_stats(l).latency;
      s.ready = net.now() + latency;
      specs.push_back(s);
    } else if (std::isfinite(next)) {
      net.advance_to(next);  // flows ready by now transfer only from here on
      check_against_reference(net, bandwidth, specs);
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::vector<double> carried(links, 0.0);
  for (const Spec& s : specs)
    for (int l : s.path) carried[l] += s.multiplicity * s.bytes;
  for (int l = 0; l < links; ++l)
    EXPECT_NEAR(net.link_stats(l).bytes, carried[l], 1e-9 * std::max(1.0, carried[l]));
}

TEST(FlowNetwork, IncrementalRatesEqualFromScratchOnRandomScenarios) {
  for (int seed = 0; seed < 30; ++seed) run_random_scenario(seed, {});
}

// With one priority every batch of ends only refills the flows at or above the ended ones'
// share (refill_above), weighted or not: the rates must still be the from-scratch ones.
TEST(FlowNetwork, RefillAfterEndsEqualsFromScratchOnRandomScenarios) {
  for (int seed = 0; seed < 60; ++seed) {
    run_random_scenario(seed, {.priorities = 1, .weighted = seed % 2 == 1});
    run_random_scenario(seed, {.priorities = 2, .weighted = true});
    if (::testing::Test::HasFailure()) return;
  }
}

// An uneven all-to-all between the egress and ingress links of 12 workers, weighted as the
// simulator weighs collectives: every pair ends at its own time, one refill each, each
// checked against the reference.
TEST(FlowNetwork, UnevenAllToAllEndsOneByOneAtFromScratchRates) {
  constexpr int kWorkers = 12;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> bytes(0.2, 2.0);
  FlowNetwork net;
  std::vector<double> bandwidth;
  for (int w = 0; w < kWorkers; ++w) {
    for (int side = 0; side < 2; ++side) {
      bandwidth.push_back(w % 3 == 0 ? 5.0 : 10.0);
      net.add_link(bandwidth.back(), 0.0, "l");
    }
  }
  std::vector<Spec> specs;
  for (int a = 0; a < kWorkers; ++a)
    for (int b = 0; b < kWorkers; ++b) {
      if (a == b) continue;
      Spec s{{2 * a, 2 * b + 1}, 1 + (a + b) % 4, 0, 0.0, bytes(rng), 1.0 / (1 + a % 2)};
      net.start_flow(s.path, s.bytes, 0.0, s.multiplicity, s.priority, s.weight);
      specs.push_back(s);
    }
  int batches = 0;
  while (net.active_flows() > 0) {
    net.advance_to(net.next_event_time());
    ++batches;
    check_against_reference(net, bandwidth, specs);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(batches, kWorkers * (kWorkers - 1) / 2);  // ends came apart: many refills ran
}

// ---- completion tolerance ----

TEST(FlowNetwork, CompletionToleranceEndsNearlyDoneFlowsWithTheOneThatEnds) {
  // Three flows share 150 B/s, 50 each. At 2 the first (100 bytes) ends; the second (100.1
  // bytes, projected to end at 2.002 at 50 B/s, 0.1 bytes left) lies within 1e-3 of its
  // transfer time and its bytes and ends with it, 1.3e-3 early; the third (101 bytes,
  // projected at 2.02) does not. Exact: the second ends after 0.1 bytes at 75 B/s, the third
  // 0.9 bytes at 150 B/s later.
  for (const double eps : {0.0, 1e-3}) {
    FlowNetwork net(eps);
    EXPECT_EQ(net.completion_tolerance(), eps);
    const int l = net.add_link(150, 0, "l");
    const FlowId first = net.start_flow({l}, 100, 0.0);
    const FlowId second = net.start_flow({l}, 100.1, 0.0);
    const FlowId third = net.start_flow({l}, 101, 0.0);
    auto end = run_to_end(net);
    EXPECT_CLOSE(end.at(first), 2.0);
    if (eps == 0) {
      EXPECT_CLOSE(end.at(second), 2.0 + 0.1 / 75);
      EXPECT_CLOSE(end.at(third), 2.0 + 0.1 / 75 + 0.9 / 150);
    } else {
      EXPECT_CLOSE(end.at(second), 2.0);
      EXPECT_CLOSE(end.at(third), 2.0 + 1.0 / 150);  // alone from 2 with 1 byte left
    }
    EXPECT_CLOSE(net.link_stats(l).bytes, 301.1);  // the second's last bytes are counted
  }
}

// A flow starved by a higher priority until 9, then alone at 100 B/s: at 10, when a flow on
// another link ends, it is projected to end at 10.005, within 1e-3 of its transfer time (it
// has transferred since 0), but 0.5 of its 100.5 bytes are left: more than 1e-3 of them. It
// ends at its exact time.
TEST(FlowNetwork, CompletionToleranceSparesAFlowWithMoreThanItsShareOfBytesLeft) {
  FlowNetwork net(1e-3);
  const int l = net.add_link(100, 0, "l");
  const int other = net.add_link(1, 0, "other");
  const FlowId high = net.start_flow({l}, 900, 0.0, 1, 1);
  const FlowId starved = net.start_flow({l}, 100.5, 0.0, 1, 0);
  const FlowId trigger = net.start_flow({other}, 10, 0.0);
  auto end = run_to_end(net);
  EXPECT_CLOSE(end.at(high), 9.0);
  EXPECT_CLOSE(end.at(trigger), 10.0);
  EXPECT_CLOSE(end.at(starved), 10.005);
}

TEST(FlowNetwork, CompletionToleranceKeepsRatesAndBytesExactOnRandomScenarios) {
  for (int seed = 0; seed < 30; ++seed) {
    run_random_scenario(seed, {.priorities = 1, .weighted = true, .tolerance = 1e-2});
    run_random_scenario(seed, {.priorities = 3, .weighted = false, .tolerance = 0.1});
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(FlowNetwork, CompletionToleranceOutsideItsRangeIsAnError) {
  EXPECT_ERROR_HAS(FlowNetwork(-1e-3), "flow network", "completion tolerance must be in [0, 0.1]");
  EXPECT_ERROR_HAS(FlowNetwork(0.5), "completion tolerance", "got 0.5");
  EXPECT_ERROR_HAS(FlowNetwork(NAN), "completion tolerance");
}

// ---- the tolerance on routed training steps, against exact times ----

// Dispatch bytes of an EP group of n members as routing makes them: member j's experts have a
// Zipf popularity (1 / (rank + 1), ranks shuffled) and every pair its own noise, so every pair
// of an A2A carries its own bytes and ends at its own time.
std::vector<double> routed_pair_bytes(int n, double per_member, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> rank(n);
  for (int j = 0; j < n; ++j) rank[j] = j;
  std::shuffle(rank.begin(), rank.end(), rng);
  std::uniform_real_distribution<double> noise(0.25, 1.75);
  std::vector<double> m(static_cast<std::size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    double sum = 0;
    for (int j = 0; j < n; ++j)
      sum += m[static_cast<std::size_t>(i) * n + j] = noise(rng) / (rank[j] + 1);
    for (int j = 0; j < n; ++j) m[static_cast<std::size_t>(i) * n + j] *= per_member / sum;
  }
  return m;
}

double makespan(const sched::Schedule& schedule, const core::Topology& topology, double eps) {
  SimOptions options;
  options.completion_tolerance = eps;
  return simulate(schedule, topology, options).makespan_s;
}

sched::LayerSetup routed_step(const core::Cluster& cluster, const char* parallel,
                              std::uint64_t seed) {
  sched::LayerSetup setup;
  setup.model.name = "moe";
  setup.model.hidden = 2048;
  setup.model.ffn_hidden = 4096;
  setup.model.experts = 128;
  setup.model.top_k = 2;
  setup.model.layers = 1;
  setup.model.heads = 16;
  setup.model.seq_len = 2048;
  setup.model.micro_batch = 1;
  setup.model.dtype_bytes = 2;
  setup.cluster = cluster;
  setup.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "test"),
                                          cluster.world_size(), 128, "test");
  const int ep = setup.parallel.ep;
  const double per_member = 2048.0 * 2 * 2048 * 2;  // tokens x top_k x hidden x dtype bytes
  for (int g = 0; g < cluster.world_size() / ep; ++g)
    setup.a2a_pair_bytes.push_back(routed_pair_bytes(ep, per_member, seed + g));
  return setup;
}

// A tolerance moves a routed step's iteration time by less than that share of it (the default
// included), over nodes and over datacenters behind slow WAN links, EP over all ranks or over
// groups: measured under half of it over 80 routings at 1e-3, 3e-3 and 1e-2.
TEST(CompletionTolerance, RoutedStepsMoveByLessThanTheTolerance) {
  const double default_eps = SimOptions().completion_tolerance;
  EXPECT_GT(default_eps, 0.0);
  core::Cluster nodes;
  nodes.name = "16x8";
  nodes.levels = {{"node", 16, 25e9, 5e-6}, {"gpu", 8, 200e9, 2e-6}};
  core::Cluster dcs;
  dcs.name = "4x4x8";
  dcs.levels = {{"datacenter", 4, 1.25e9, 1e-3}, {"node", 4, 25e9, 5e-6}, {"gpu", 8, 200e9, 2e-6}};
  for (core::Cluster c : {nodes, dcs}) {
    c.device = {312e12, 80e9, 2e12};
    const core::Topology topology(c);
    for (const char* parallel : {"ep=128", "ep=32"}) {
      for (std::uint64_t seed : {1, 2, 3}) {
        const sched::Schedule schedule = sched::build_training_step(routed_step(c, parallel, seed));
        const double exact = makespan(schedule, topology, 0.0);
        for (const double eps : {1e-3, default_eps, 1e-2}) {
          const double moved = std::abs(makespan(schedule, topology, eps) - exact) / exact;
          EXPECT_LE(moved, eps) << c.name << " " << parallel << " seed " << seed << " eps " << eps;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moecomm::sim
