#include "cli/profile_command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <regex>

#include <nlohmann/json.hpp>

#include "cli/flag_checks.h"
#include "cli/json_output.h"
#include "cli/model_step_probe.h"
#include "cli/mpi_command.h"
#include "cli/profile_nccl_tests.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/units.h"
#include "cost/profile_fit.h"
#include "rt/collective_profile.h"
#include "rt/device_profile.h"
#include "rt/mpi_base.h"

namespace moecomm::cli {

ProfileCommand::ProfileCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "profile",
      "Measure A2A, AllGather, ReduceScatter and AllReduce per level (one rank per worker of\n"
      "the level) over a sweep of sizes, and the device's GEMM and memcpy rates with all ranks\n"
      "at work; print a table like nccl-tests' and write the fitted bandwidth, latency and\n"
      "efficiency curves as a cluster file for plan, sim and train --cluster.\n"
      "Run as: mpirun -np P moecomm profile [--ranks-per-node R] [...]");
  add_layout_options();
  add_sweep_options();
  add_output_options();
}

void ProfileCommand::add_layout_options() {
  sub_->add_option("--ranks-per-node", ranks_per_node_,
                   "ranks per node (node n holds ranks nR..nR+R-1; default: "
                   "MOECOMM_TESTBED_RANKS_PER_NODE, else all ranks on one node)")
      ->check(CLI::Range(1, 1 << 20));
  sub_->add_option("--datacenters", datacenters_,
                   "datacenters the nodes are split over, in order (default: "
                   "MOECOMM_TESTBED_DATACENTERS, else 1)")
      ->check(CLI::Range(1, 1 << 20));
}

void ProfileCommand::add_sweep_options() {
  sub_->add_option("--min-bytes", min_bytes_,
                   "smallest size: bytes of the per-rank buffer (A2A: sent by a rank; "
                   "AllGather: output; ReduceScatter: input; AllReduce: buffer); KB/MB/GB = "
                   "1e3/1e6/1e9, K/M/G and KiB/MiB/GiB = 2^10/2^20/2^30")
      ->capture_default_str();
  sub_->add_option("--max-bytes", max_bytes_, "largest size (at most 1GiB)")->capture_default_str();
  sub_->add_option("--factor", factor_, "ratio of consecutive sizes")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(1.1, 1024.0));
  sub_->add_option("--iters", iters_,
                   "timed iterations per size, at most: repetitions stop after 3 once a size's "
                   "iterations took 0.25 s, so large sizes on slow links run 3 times")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub_->add_option("--warmup", warmup_, "untimed iterations before each size (at most 0.25 s)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub_->add_option("--gemm-size", gemm_size_,
                   "order of the square fp32 GEMM that measures the device (an expert GEMM's)")
      ->capture_default_str()
      ->check(CLI::Range(16, 8192));
  CLI::Option* model =
      sub_->add_option("--model", model_,
                       "rate the device by this model's training step instead of the GEMM: tiny, "
                       "a preset or a JSON file, as `moecomm bench --model` (its forward and "
                       "backward on each rank's share of the experts, all ranks at once; the flops "
                       "are the simulator's count), so `bench` predicts its compute");
  sub_->add_option("--batch", batch_, "with --model: sequences per rank (default: the model's)")
      ->check(CLI::Range(1, 4096))
      ->needs(model);
  sub_->add_option("--seq-len", seq_len_,
                   "with --model: tokens per sequence (default: the model's)")
      ->check(CLI::Range(2, 4096))
      ->needs(model);
  sub_->add_option(
          "--model-seconds", model_seconds_,
          "with --model: the ranks time steps together for this long, and at least 3 of them")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(0.1, 600.0))
      ->needs(model);
  sub_->add_option("--traffic-bytes", traffic_bytes_,
                   "with --model: time the steps again while each rank's second thread runs ring "
                   "AllReduces of this size back to back; the step time alone over the time "
                   "beside them is the cluster file's overlapped_compute_share (the simulator "
                   "slows compute by it while its rank communicates); 0: not measured")
      ->capture_default_str()
      ->needs(model);
  sub_->add_option("--timeout", timeout_s_, "seconds a collective may stall before the job fails")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
}

void ProfileCommand::add_output_options() {
  sub_->add_option("-o,--out", out_, "the cluster file to write")->capture_default_str();
  sub_->add_option("--from-nccl-tests", nccl_tests_,
                   "measure nothing: fit the cluster file to these nccl-tests output files "
                   "(alltoall_perf, all_reduce_perf, all_gather_perf, reduce_scatter_perf; "
                   "single-node runs fit the gpu level, multi-node runs the node level), then "
                   "print every measured busbw beside `sim --collective`'s on the fit; runs "
                   "without mpirun")
      ->expected(1, -1);
  sub_->add_option("--cluster", device_cluster_,
                   "with --from-nccl-tests: the preset or file whose device the fitted cluster "
                   "keeps (default: " +
                       std::string(core::kDefaultCluster) + ")");
  sub_->add_option("--name", name_, "the cluster's name (default: profiled-<counts>, e.g. 2x4)");
  sub_->add_option("--table-out", table_out_,
                   "also write the measurements and the fit as JSON (what --json prints)");
  sub_->add_flag("--json", json_,
                 "print one JSON object: {levels: [{name, count, ranks, bandwidth_GBps, "
                 "latency_us, r_squared}], device, rows: [{level, collective, ranks, bytes, "
                 "time_us, algbw_GBps, busbw_GBps, algorithm}], cluster_file}");
}

namespace {

constexpr int64_t kMaxSize = int64_t{1} << 30;

int64_t parse_size(const std::string& text, const std::string& flag, bool zero_allowed = false) {
  return cli::parse_size(text, flag, kMaxSize, "1GiB", zero_allowed);
}

std::vector<int64_t> sweep_sizes(int64_t lo, int64_t hi, double factor) {
  if (lo > hi) throw Error("--min-bytes", "is larger than --max-bytes");
  std::vector<int64_t> sizes;
  for (double s = static_cast<double>(lo); s <= hi * (1 + 1e-12); s *= factor)
    if (sizes.empty() || std::llround(s) != sizes.back()) sizes.push_back(std::llround(s));
  if (sizes.size() < 2)
    throw Error("--max-bytes",
                "the sweep has one size; the fit needs at least 2 (raise "
                "--max-bytes or lower --factor)");
  return sizes;
}

struct Layout {
  int ranks_per_node = 1;
  std::vector<rt::ProfileGroup> groups;
  std::vector<cost::LevelSpec> levels;
};

// The flags, else the testbed's variables, else one node in one datacenter.
Layout resolve_layout(int world, int ranks_per_node, int datacenters) {
  Layout l;
  if (!ranks_per_node) ranks_per_node = testbed_env_int("MOECOMM_TESTBED_RANKS_PER_NODE");
  if (!datacenters) datacenters = testbed_env_int("MOECOMM_TESTBED_DATACENTERS");
  l.ranks_per_node = ranks_per_node ? ranks_per_node : world;
  l.groups = rt::profile_groups(world, l.ranks_per_node, datacenters ? datacenters : 1);
  const int nodes = testbed_env_int("MOECOMM_TESTBED_NODES");
  if (nodes && nodes * l.ranks_per_node != world)
    throw Error("MOECOMM_TESTBED_NODES", std::to_string(nodes) + " nodes do not hold the " +
                                             std::to_string(world) + " ranks at " +
                                             std::to_string(l.ranks_per_node) + " per node");
  for (const rt::ProfileGroup& g : l.groups)
    l.levels.push_back({g.level, static_cast<int>(g.ranks.size())});
  return l;
}

// Fail before measuring, not after it.
void check_writable(const std::string& path, const std::string& flag) {
  if (path.empty()) throw Error(flag, "must name a file");
  const bool existed = std::filesystem::exists(path);
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw Error(flag, path + ": cannot be written");
  probe.close();
  if (!existed) std::filesystem::remove(path);
}

// The cluster file and --table-out hold the figures --json prints, rounded alike.
void write_json(const nlohmann::json& doc, const std::string& path, const std::string& flag) {
  std::ofstream f(path);
  f << dump_json(doc) << "\n";
  if (!f) throw Error(flag, path + ": cannot be written");
}

std::string counts_name(const std::vector<cost::LevelSpec>& levels) {
  std::string name = "profiled-";
  for (size_t i = 0; i < levels.size(); ++i)
    name += (i ? "x" : "") + std::to_string(levels[i].count);
  return name;
}

double gbps(double bytes_per_s) {
  return bytes_per_s / units::kGB;
}

nlohmann::json rows_json(const std::vector<cost::ProfileRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const cost::ProfileRow& r : rows)
    out.push_back({{"level", r.level},
                   {"collective", cost::collective_name(r.op)},
                   {"ranks", r.ranks},
                   {"bytes", static_cast<int64_t>(r.bytes)},
                   {"time_us", r.seconds / units::kUs},
                   {"algbw_GBps", gbps(cost::algbw(r))},
                   {"busbw_GBps", gbps(cost::busbw(r))},
                   {"algorithm", r.algorithm}});
  return out;
}

struct Report {
  std::vector<rt::ProfileGroup> groups;
  std::vector<cost::ProfileRow> rows;
  cost::ProfileFit fit;
  rt::DeviceProfile device;
  int gemm_size = 0;
  std::string cluster_file;
};

nlohmann::json report_json(const Report& r) {
  nlohmann::json levels = nlohmann::json::array();
  for (size_t i = 0; i < r.fit.levels.size(); ++i) {
    const cost::LevelFit& l = r.fit.levels[i];
    levels.push_back({{"name", l.name},
                      {"count", l.count},
                      {"ranks", r.groups[i].ranks},
                      {"bandwidth_GBps", gbps(l.bandwidth)},
                      {"latency_us", l.latency / units::kUs},
                      {"overhead_us", l.overhead / units::kUs},
                      {"r_squared", l.r_squared},
                      {"fitted_sizes", l.sizes}});
  }
  const rt::DeviceProfile& d = r.device;
  return {{"levels", levels},
          {"device",
           {{"tflops", d.device().flops / units::kTflops},
            {"backward_tflops", d.device().backward_peak(core::Dtype::kFp32) / units::kTflops},
            {"gemm_size", r.gemm_size},
            {"gemm_tflops_slowest_rank", d.gemm_flops_min / units::kTflops},
            {"model_forward_tflops", d.model_forward_flops / units::kTflops},
            {"model_backward_tflops", d.model_backward_flops / units::kTflops},
            {"model_forward_tflops_slowest_rank", d.model_forward_flops_min / units::kTflops},
            {"model_backward_tflops_slowest_rank", d.model_backward_flops_min / units::kTflops},
            {"overlapped_compute_share", d.overlapped_compute_share()},
            {"overlapped_step_ratio", d.overlapped_step_ratio},
            {"traffic_allreduces", d.traffic_calls},
            {"memory_GB", d.memory_bytes / units::kGB},
            {"memory_bandwidth_GBps", gbps(d.memory_bandwidth)}}},
          {"rows", rows_json(r.rows)},
          {"cluster_file", r.cluster_file}};
}

void print_table(std::ostream& out, const std::vector<cost::ProfileRow>& rows) {
  char line[256];
  std::snprintf(line, sizeof line, "%-11s %-14s %5s %12s %12s %11s %11s  %s\n", "level",
                "collective", "ranks", "size", "time_us", "algbw_GBps", "busbw_GBps", "algorithm");
  out << line;
  for (const cost::ProfileRow& r : rows) {
    std::snprintf(line, sizeof line, "%-11s %-14s %5d %12.0f %12.2f %11.4f %11.4f  %s\n",
                  r.level.c_str(), cost::collective_name(r.op).c_str(), r.ranks, r.bytes,
                  r.seconds / units::kUs, gbps(cost::algbw(r)), gbps(cost::busbw(r)),
                  r.algorithm.c_str());
    out << line;
  }
}

void print_fit(std::ostream& out, const Report& r, int world) {
  char line[512];
  out << "\nfitted per level (alpha-beta of the alltoall against the bytes crossing one "
         "worker's link, bandwidth-bound sizes):\n";
  std::snprintf(line, sizeof line, "%-11s %5s %15s %11s %12s %10s %6s  %s\n", "level", "count",
                "bandwidth_GBps", "latency_us", "overhead_us", "r_squared", "sizes",
                "efficiency min..max");
  out << line;
  for (const cost::LevelFit& l : r.fit.levels) {
    std::string eff;
    for (const auto& [op, points] : r.fit.efficiency.at(l.name)) {
      double lo = 1, hi = 0;
      for (auto [bytes, e] : points) lo = std::min(lo, e), hi = std::max(hi, e);
      char part[64];
      std::snprintf(part, sizeof part, "%s%s %.2f..%.2f", eff.empty() ? "" : ", ", op.c_str(), lo,
                    hi);
      eff += part;
    }
    std::snprintf(line, sizeof line, "%-11s %5d %15.4f %11.2f %12.3f %10.4f %6d  %s\n",
                  l.name.c_str(), l.count, gbps(l.bandwidth), l.latency / units::kUs,
                  l.overhead / units::kUs, l.r_squared, l.sizes, eff.c_str());
    out << line;
  }
  const rt::DeviceProfile& d = r.device;
  std::snprintf(line, sizeof line,
                "device, per rank with all %d ranks at work: GEMM %d^3 %.2f GFLOP/s (slowest rank "
                "%.2f), memcpy %.2f GB/s, memory %.2f GB\n",
                world, r.gemm_size, d.gemm_flops / 1e9, d.gemm_flops_min / 1e9,
                gbps(d.memory_bandwidth), d.memory_bytes / units::kGB);
  out << line;
  if (d.model_forward_flops > 0) {
    std::snprintf(line, sizeof line,
                  "device rates from the model's training step, per rank: forward %.2f GFLOP/s "
                  "(slowest rank %.2f), backward %.2f GFLOP/s (slowest rank %.2f); the cluster "
                  "file's tflops and backward_tflops\n",
                  d.model_forward_flops / 1e9, d.model_forward_flops_min / 1e9,
                  d.model_backward_flops / 1e9, d.model_backward_flops_min / 1e9);
    out << line;
  }
  if (d.traffic_calls > 0) {
    std::snprintf(line, sizeof line,
                  "model step beside %lld background AllReduces: %.3f x the time alone; the "
                  "cluster file's overlapped_compute_share %.3f\n",
                  static_cast<long long>(d.traffic_calls), 1 / d.overlapped_step_ratio,
                  d.overlapped_compute_share());
    out << line;
  }
  out << "wrote " << r.cluster_file << " (moecomm plan --cluster " << r.cluster_file
      << ", moecomm sim --cluster " << r.cluster_file << ")\n";
}

// Progress on rank 0: a line when a level's collective has done its largest size.
std::function<void(const cost::ProfileRow&)> progress(std::ostream& err, int64_t largest) {
  const double start = MPI_Wtime();
  return [&err, largest, start](const cost::ProfileRow& r) {
    if (mpi_world_rank() != 0 || r.bytes != rt::profile_bytes(largest, r.ranks)) return;
    char line[160];
    std::snprintf(line, sizeof line, "profile: %s %s over %d ranks done (%.1f s so far)\n",
                  r.level.c_str(), cost::collective_name(r.op).c_str(), r.ranks,
                  MPI_Wtime() - start);
    err << line;
    err.flush();
  };
}

}  // namespace

int ProfileCommand::run(std::ostream& out, std::ostream& err) const {
  if (!nccl_tests_.empty()) {
    for (const char* flag :
         {"--ranks-per-node", "--datacenters", "--min-bytes", "--max-bytes", "--factor", "--iters",
          "--warmup", "--gemm-size", "--model", "--timeout", "--table-out"}) {
      if (sub_->count(flag) > 0)
        throw Error(flag, "measures; --from-nccl-tests fits files and measures nothing");
    }
    return profile_from_nccl_tests(
        {nccl_tests_, device_cluster_.empty() ? core::kDefaultCluster : device_cluster_, name_,
         out_, json_},
        out);
  }
  if (!device_cluster_.empty()) throw Error("--cluster", "applies only to --from-nccl-tests");
  return run_under_mpi(err, [&] { return profile(out, err); });
}

int ProfileCommand::profile(std::ostream& out, std::ostream& err) const {
  const int world = mpi_world_size(), me = mpi_world_rank();
  const Layout layout = resolve_layout(world, ranks_per_node_, datacenters_);
  rt::ProfileSweep sweep;
  sweep.sizes = sweep_sizes(parse_size(min_bytes_, "--min-bytes"),
                            parse_size(max_bytes_, "--max-bytes"), factor_);
  sweep.max_iters = iters_;
  sweep.warmup = warmup_;
  sweep.timeout_s = timeout_s_;
  if (me == 0) {
    check_writable(out_, "--out");
    if (!table_out_.empty()) check_writable(table_out_, "--table-out");
    err << "profile: device (GEMM " << gemm_size_ << ", memcpy) with all ranks at once\n";
  }
  Report report;
  report.groups = layout.groups;
  report.gemm_size = gemm_size_;
  report.cluster_file = out_;
  rt::DeviceProbe probe;
  probe.gemm_size = gemm_size_;
  probe.ranks_per_node = layout.ranks_per_node;
  probe.timeout_s = timeout_s_;
  if (!model_.empty()) {
    probe.model_step = model_step_probe(model_, world, batch_, seq_len_);
    probe.model_step->seconds = model_seconds_;
    probe.model_step->traffic_bytes = parse_size(traffic_bytes_, "--traffic-bytes", true);
  }
  report.device = rt::profile_device(probe);
  report.rows = rt::profile_collectives(layout.groups, sweep, progress(err, sweep.sizes.back()));
  if (me != 0) return 0;
  if (!json_) print_table(out, report.rows);
  report.fit = cost::fit_profile(report.rows, layout.levels);
  const std::string name = name_.empty() ? counts_name(layout.levels) : name_;
  write_json(
      core::cluster_to_json(cost::profiled_cluster(report.fit, report.device.device(), name)), out_,
      "--out");
  const nlohmann::json doc = report_json(report);
  if (!table_out_.empty()) write_json(doc, table_out_, "--table-out");
  if (json_)
    out << dump_json(doc, -1) << "\n";
  else
    print_fit(out, report, world);
  return 0;
}

}  // namespace moecomm::cli
