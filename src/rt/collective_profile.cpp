#include "rt/collective_profile.h"

#include <algorithm>
#include <cstddef>

#include "core/error.h"
#include "core/statistics.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"

namespace moecomm::rt {

using cost::Collective;

namespace {

constexpr Collective kOps[] = {Collective::kAllToAll, Collective::kAllGather,
                               Collective::kReduceScatter, Collective::kAllReduce};

core::RankGroup strided(int count, int stride) {
  core::RankGroup g;
  for (int i = 0; i < count; ++i) g.push_back(i * stride);
  return g;
}

// The rows every rank expects, without times: per group, per collective, per distinct size.
std::vector<cost::ProfileRow> row_layout(const ProfileGroup& g, const ProfileSweep& sweep) {
  const int n = static_cast<int>(g.ranks.size());
  std::vector<int64_t> sizes;
  for (int64_t s : sweep.sizes) sizes.push_back(profile_bytes(s, n));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<cost::ProfileRow> rows;
  for (Collective op : kOps)
    for (int64_t s : sizes)
      rows.push_back({g.level, op, n, static_cast<double>(s), 0.0, profile_algorithm(op, s)});
  return rows;
}

void barrier(const Comm& comm, const CallOptions& options) {
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm.handle(), &req), "MPI_Ibarrier");
  wait_all({&req, 1}, comm, "profile barrier", options);
}

double group_max(const Comm& comm, double value, const CallOptions& options) {
  double out = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm.handle(), &req),
            "MPI_Iallreduce");
  wait_all({&req, 1}, comm, "profile time", options);
  return out;
}

// One point's buffers, allocated (and paged in) before timing. Zeros: an AllReduce repeated
// in place stays finite.
struct Buffers {
  Buffers(Collective op, int64_t bytes, int n) {
    if (op == Collective::kAllToAll || op == Collective::kAllGather)
      data.assign(static_cast<size_t>(bytes), std::byte{0});
    if (op == Collective::kAllToAll) counts.assign(n, bytes / n);
    if (op == Collective::kAllGather) out.assign(static_cast<size_t>(bytes), std::byte{0});
    if (op == Collective::kReduceScatter || op == Collective::kAllReduce)
      floats.assign(static_cast<size_t>(bytes) / sizeof(float), 0.0f);
  }
  std::vector<std::byte> data, out;
  std::vector<int64_t> counts;
  std::vector<float> floats;
};

void run_once(const Comm& comm, Collective op, Buffers& b, const CallOptions& options) {
  switch (op) {
    case Collective::kAllToAll:
      // Equal blocks both ways, known to every member: no counts exchange, as the token paths.
      all_to_all_v(comm, std::span<const std::byte>(b.data), b.counts, sched::Algorithm::kFlat,
                   options, b.counts);
      return;
    case Collective::kAllGather:
      all_gather(comm, std::span<const std::byte>(b.data).first(b.data.size() / comm.size()), b.out,
                 options);
      return;
    case Collective::kReduceScatter:
      reduce_scatter_sum(comm, b.floats, options);
      return;
    case Collective::kAllReduce:
      all_reduce_sum(comm, b.floats, options);
      return;
  }
}

// Seconds of the slowest member for one call, started together. Every member gets the same
// value, so the repetition decisions below agree and the calls match.
double time_once(const Comm& comm, Collective op, Buffers& b, const CallOptions& options) {
  barrier(comm, options);
  const double start = MPI_Wtime();
  run_once(comm, op, b, options);
  return group_max(comm, MPI_Wtime() - start, options);
}

double time_point(const Comm& comm, const cost::ProfileRow& row, const ProfileSweep& sweep,
                  const CallOptions& options) {
  Buffers b(row.op, static_cast<int64_t>(row.bytes), comm.size());
  double spent = 0;
  for (int w = 0; w < sweep.warmup && spent < sweep.point_budget_s; ++w)
    spent += time_once(comm, row.op, b, options);
  const int least = std::min(sweep.min_iters, sweep.max_iters);
  std::vector<double> times;
  spent = 0;
  while (static_cast<int>(times.size()) < sweep.max_iters &&
         (static_cast<int>(times.size()) < least || spent < sweep.point_budget_s)) {
    times.push_back(time_once(comm, row.op, b, options));
    spent += times.back();
  }
  return core::median(times);
}

// Members of the group fill in the times; the first member sends them to every rank.
void measure_group(const CommPool& pool, const Comm& world, const ProfileGroup& g,
                   const ProfileSweep& sweep, std::vector<cost::ProfileRow>& rows,
                   const std::function<void(const cost::ProfileRow&)>& on_row) {
  const CommKey key{g.ranks, 0, "profile " + g.level};
  CallOptions options;
  options.label = "profile." + g.level;
  options.timeout_s = sweep.timeout_s;
  std::vector<double> times(rows.size(), 0.0);
  if (pool.has(key)) {
    const Comm& comm = pool.at(key);
    for (size_t i = 0; i < rows.size(); ++i) {
      options.label = "profile." + g.level + "." + cost::collective_name(rows[i].op);
      times[i] = rows[i].seconds = time_point(comm, rows[i], sweep, options);
      if (comm.rank() == 0 && on_row) on_row(rows[i]);
    }
  }
  // Ranks outside the group wait here, as long as the members' calls (each bounded) may take.
  options.label = "profile." + g.level + " results";
  options.timeout_s = sweep.timeout_s * (3.0 * (sweep.max_iters + sweep.warmup) * rows.size() + 1);
  const int root = g.ranks.front();
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(times.data(), static_cast<int>(times.size()), MPI_DOUBLE, root,
                       world.handle(), &req),
            "MPI_Ibcast");
  wait_all({&req, 1}, world, "broadcast from rank " + std::to_string(root), options);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].seconds = times[i];
}

}  // namespace

std::vector<ProfileGroup> profile_groups(int world, int ranks_per_node, int datacenters) {
  if (world < 2) throw Error("profile", "needs at least 2 ranks (a level with 2 workers)");
  if (ranks_per_node < 1 || world % ranks_per_node != 0)
    throw Error("--ranks-per-node", std::to_string(ranks_per_node) + " does not divide the " +
                                        std::to_string(world) + " ranks");
  const int nodes = world / ranks_per_node;
  if (datacenters < 1 || nodes % datacenters != 0)
    throw Error("--datacenters", std::to_string(datacenters) + " does not divide the " +
                                     std::to_string(nodes) + " nodes");
  const int per_dc = nodes / datacenters;
  std::vector<ProfileGroup> groups;
  if (datacenters > 1)
    groups.push_back({"datacenter", strided(datacenters, per_dc * ranks_per_node)});
  if (per_dc > 1) groups.push_back({"node", strided(per_dc, ranks_per_node)});
  if (ranks_per_node > 1) groups.push_back({"gpu", strided(ranks_per_node, 1)});
  return groups;
}

int64_t profile_bytes(int64_t size, int ranks) {
  const int64_t block = std::max<int64_t>(1, size / (int64_t{sizeof(float)} * ranks));
  return block * int64_t{sizeof(float)} * ranks;
}

std::string profile_algorithm(Collective op, int64_t bytes) {
  switch (op) {
    case Collective::kAllToAll:
      return "mpi-ialltoallv";
    case Collective::kAllGather:
      return "mpi-iallgather";
    case Collective::kReduceScatter:
      return "mpi-ireduce-scatter-block";
    case Collective::kAllReduce:
      return bytes >= kRingAllReduceBytes ? "ring" : "mpi-iallreduce";
  }
  return "?";
}

std::vector<cost::ProfileRow> profile_collectives(
    const std::vector<ProfileGroup>& groups, const ProfileSweep& sweep,
    const std::function<void(const cost::ProfileRow&)>& on_row) {
  if (sweep.sizes.empty()) throw Error("profile", "no sizes to measure");
  if (sweep.max_iters < 1) throw Error("profile", "needs at least one timed iteration");
  std::vector<CommKey> keys;
  for (const ProfileGroup& g : groups) keys.push_back({g.ranks, 0, "profile " + g.level});
  int world_size = 0;
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
  keys.push_back({strided(world_size, 1), 0, "profile world"});
  const CommPool pool(MPI_COMM_WORLD, keys);
  const Comm& world = pool.at(keys.back());
  std::vector<cost::ProfileRow> all;
  for (const ProfileGroup& g : groups) {
    std::vector<cost::ProfileRow> rows = row_layout(g, sweep);
    measure_group(pool, world, g, sweep, rows, on_row);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return all;
}

}  // namespace moecomm::rt
