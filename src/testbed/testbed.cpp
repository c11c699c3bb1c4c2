#include "testbed/testbed.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "testbed/host_checks.h"
#include "testbed/host_command.h"
#include "testbed/launch_files.h"
#include "testbed/setup_commands.h"

namespace moecomm::testbed {

namespace fs = std::filesystem;

namespace {

// No single ip/tc call should take more than a moment; this only guards against a hang.
constexpr double kStepTimeout = 30;
// `down` kills a namespace's processes until none is left, for at most this long.
constexpr int kKillRounds = 100;
constexpr auto kKillPause = std::chrono::milliseconds(50);

std::string where(const std::string& name) {
  return "testbed " + name;
}

CommandResult run_step(const std::vector<std::string>& argv) {
  CommandOptions options;
  options.timeout_s = kStepTimeout;
  return run_command(argv, options);
}

std::string trimmed(const std::string& text) {
  const std::size_t end = text.find_last_not_of(" \n\t");
  return end == std::string::npos ? "" : text.substr(0, end + 1);
}

std::string failure(const std::vector<std::string>& argv, const CommandResult& r) {
  std::string why = "`" + shell_quote(argv) + "` failed (exit " + std::to_string(r.status) + ")";
  if (r.timed_out) why = "`" + shell_quote(argv) + "` did not finish in time";
  const std::string err = trimmed(r.err);
  return err.empty() ? why : why + ": " + err;
}

// The message for a failed setup step, by what the step was checking.
Error step_error(const TestbedSpec& spec, const SetupStep& step, const CommandResult& r) {
  const std::string what = where(spec.name);
  switch (step.check) {
    case Check::kNamespace:
      return Error(what,
                   "cannot create network namespaces (are they allowed here? they need "
                   "root outside a restricted container): " +
                       failure(step.argv, r));
    case Check::kTbf:
      return Error(what,
                   "the tbf qdisc is unavailable (CONFIG_NET_SCH_TBF), links cannot be "
                   "shaped: " +
                       failure(step.argv, r));
    case Check::kNetem:
      return Error(what,
                   "latency needs the netem qdisc (CONFIG_NET_SCH_NETEM), which this "
                   "kernel lacks; give the rate alone (e.g. --node-link 200mbit) [" +
                       failure(step.argv, r) + "]");
    case Check::kNone:
      break;
  }
  return Error(what, failure(step.argv, r));
}

// The names `ip netns list` shows (first word of each line: "name (id: 3)").
std::vector<std::string> existing_namespaces() {
  const CommandResult r = run_step(list_namespaces_command());
  if (r.status != 0) {
    throw Error("`ip netns list` failed (exit " + std::to_string(r.status) +
                "): " + trimmed(r.err));
  }
  std::vector<std::string> names;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  return names;
}

std::vector<std::string> namespaces_of(const std::string& name) {
  std::vector<std::string> found;
  for (const std::string& ns : existing_namespaces()) {
    if (is_testbed_namespace(ns, name)) found.push_back(ns);
  }
  return found;
}

std::vector<int> namespace_pids(const std::string& ns) {
  const CommandResult r = run_step(namespace_pids_command(ns));
  std::vector<int> pids;
  std::istringstream words(r.out);
  int pid = 0;
  while (words >> pid) pids.push_back(pid);
  return pids;
}

// SIGKILL to every process in the namespaces until none is left (a dying mpirun may still
// start one). Returns how many were killed.
int kill_namespace_processes(const std::string& name, const std::vector<std::string>& nss) {
  std::set<int> killed;
  for (int round = 0; round < kKillRounds; ++round) {
    std::vector<int> pids;
    for (const std::string& ns : nss) {
      for (int pid : namespace_pids(ns)) pids.push_back(pid);
    }
    if (pids.empty()) return static_cast<int>(killed.size());
    for (int pid : pids) {
      if (pid != getpid() && kill(pid, SIGKILL) == 0) killed.insert(pid);
    }
    std::this_thread::sleep_for(kKillPause);
  }
  throw Error(where(name), "processes in its namespaces survive SIGKILL; see `ip netns pids`");
}

// Everything `down` does; also the clean-up of a failed `up`. Returns (namespaces deleted,
// processes killed).
std::pair<int, int> teardown(const std::string& name) {
  std::vector<std::string> nss = namespaces_of(name);
  // Nodes first, the fabric last (the order does not matter to the kernel; it reads well).
  std::stable_partition(nss.begin(), nss.end(), [](const std::string& ns) {
    return ns.size() < 4 || ns.substr(ns.size() - 4) != "-fab";
  });
  const int killed = kill_namespace_processes(name, nss);
  for (const std::vector<std::string>& argv : delete_namespace_commands(nss)) {
    const CommandResult r = run_step(argv);
    if (r.status != 0) throw Error(where(name), failure(argv, r));
  }
  const std::vector<std::string> left = namespaces_of(name);
  if (!left.empty()) {
    throw Error(where(name), "namespace " + left.front() + " is still there after `ip netns del`");
  }
  std::error_code ec;
  fs::remove_all(state_dir(name), ec);
  if (ec) throw Error(state_dir(name), "cannot remove the testbed state: " + ec.message());
  return {static_cast<int>(nss.size()), killed};
}

void write_file(const std::string& path, const std::string& text, bool executable) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) throw Error(path, "cannot write");
  if (executable && chmod(path.c_str(), 0755) != 0) {
    throw Error(path, std::string("cannot make it executable: ") + std::strerror(errno));
  }
}

// Claims the state directory: creating its last component fails when it exists, so two
// `up`s of one name cannot both proceed.
void claim_state_dir(const TestbedSpec& spec) {
  const std::string dir = state_dir(spec.name);
  std::error_code ec;
  fs::create_directories(state_parent_dir(), ec);
  if (ec) {
    throw Error(state_parent_dir(), "cannot create the testbed state directory: " + ec.message());
  }
  if (mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST) {
      throw Error(where(spec.name) + " already exists (state in " + dir +
                  "); take it down first: moecomm testbed down --name " + spec.name);
    }
    throw Error(dir, std::string("cannot create the testbed state: ") + std::strerror(errno));
  }
}

void build(const TestbedSpec& spec) {
  for (const SetupStep& step : up_steps(spec)) {
    const CommandResult r = run_step(step.argv);
    if (r.status != 0) throw step_error(spec, step, r);
  }
  const std::string dir = state_dir(spec.name);
  write_file(dir + "/hostfile", hostfile_text(spec), false);
  write_file(dir + "/agent.sh", agent_script(spec), true);
  write_state(dir, spec);  // last: a state.json means a finished testbed
}

void print_layout(const TestbedSpec& spec, std::ostream& out) {
  out << "testbed " << spec.name << ": " << spec.nodes << " nodes x " << spec.ranks_per_node
      << " ranks";
  if (spec.datacenters > 1) out << " in " << spec.datacenters << " datacenters";
  out << "\n  node links: " << format_rate(spec.node_link.rate_Bps);
  if (spec.node_link.latency_s > 0) out << ", " << format_latency(spec.node_link.latency_s);
  out << " each way\n";
  if (spec.dc_link) {
    out << "  datacenter links: " << format_rate(spec.dc_link->rate_Bps);
    if (spec.dc_link->latency_s > 0) out << ", " << format_latency(spec.dc_link->latency_s);
    out << " each way\n";
  }
}

}  // namespace

void up(const TestbedSpec& spec, std::ostream& out) {
  spec.validate();
  const std::string what = "testbed up";
  require_network_privileges(what);
  require_programs(what, {"ip", "tc", "unshare", "mpirun"});
  const std::vector<std::string> leftovers = namespaces_of(spec.name);
  if (!leftovers.empty()) {
    throw Error(where(spec.name), "namespace " + leftovers.front() +
                                      " already exists; take it down first: moecomm testbed "
                                      "down --name " +
                                      spec.name);
  }
  claim_state_dir(spec);
  try {
    build(spec);
  } catch (...) {
    try {
      teardown(spec.name);
    } catch (const Error&) {  // the first error is the one to report
    }
    throw;
  }
  print_layout(spec, out);
  for (int k = 0; k < spec.nodes; ++k) {
    out << "  " << spec.node_hostname(k) << "  " << spec.node_address(k) << "  "
        << spec.node_namespace(k);
    if (spec.datacenters > 1) out << "  datacenter " << spec.datacenter_of(k);
    out << "\n";
  }
  out << "state: " << state_dir(spec.name) << "\n"
      << "run: moecomm testbed run --name " << spec.name << " -- PROGRAM ARGS...\n"
      << "take down: moecomm testbed down --name " << spec.name << "\n";
}

int run(const RunRequest& request, std::ostream& out, std::ostream& err) {
  validate_name(request.name);
  const std::string what = "testbed run";
  if (request.command.empty()) {
    throw Error(what,
                "no program given; usage: moecomm testbed run [--name NAME] [--np P] -- "
                "PROGRAM ARGS...");
  }
  if (request.np < 0) throw Error("--np", "must be at least 1");
  if (!(request.timeout_s > 0)) throw Error("--timeout", "must be positive");
  const std::string dir = state_dir(request.name);
  if (!fs::exists(dir + "/state.json")) {
    throw Error(where(request.name) + " is not up (no " + dir +
                "/state.json); bring it up with moecomm testbed up --name " + request.name +
                " ...");
  }
  const TestbedSpec spec = read_state(dir);
  require_network_privileges(what);
  require_programs(what, {"ip", "unshare", "mpirun", "hostname"});
  const std::vector<std::string> present = existing_namespaces();
  for (const std::string& ns : spec.namespaces()) {
    if (std::find(present.begin(), present.end(), ns) == present.end()) {
      throw Error(where(spec.name) + " is broken: namespace " + ns +
                  " is missing; take it down (moecomm testbed down --name " + spec.name +
                  ") and bring it up again");
    }
  }
  const int np = request.np > 0 ? request.np : spec.nodes * spec.ranks_per_node;
  const LaunchPaths paths = {dir + "/hostfile", dir + "/agent.sh", find_program("mpirun")};
  CommandOptions options;
  options.timeout_s = request.timeout_s;
  options.out = &out;
  options.err = &err;
  options.inherit_stdin = true;
  options.own_process_group = false;
  options.parent_death_signal = SIGTERM;
  options.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  const CommandResult r = run_command(mpirun_command(spec, paths, np, request.command), options);
  if (r.timed_out) {
    throw Error(where(spec.name), "`" + shell_quote(request.command) + "` did not finish within " +
                                      format_number(request.timeout_s) +
                                      " s (--timeout); stopped it and everything it started");
  }
  return r.status;
}

void down(const std::string& name, std::ostream& out) {
  validate_name(name);
  const std::string what = "testbed down";
  require_network_privileges(what);
  require_programs(what, {"ip"});
  const bool had_state = fs::exists(state_dir(name));
  const auto [namespaces, killed] = teardown(name);
  if (namespaces == 0 && !had_state) {
    out << "testbed " << name << ": nothing to take down\n";
    return;
  }
  out << "testbed " << name << " is down: deleted " << namespaces << " namespaces";
  if (killed > 0) out << ", killed " << killed << " processes";
  out << "\n";
}

nlohmann::json status(const std::string& name) {
  validate_name(name);
  const std::string dir = state_dir(name);
  require_programs("testbed status", {"ip"});
  if (!fs::exists(dir + "/state.json")) {
    const std::vector<std::string> left = namespaces_of(name);
    if (!left.empty()) {
      throw Error(where(name) + " is not up, but " + std::to_string(left.size()) +
                  " of its namespaces are left over (" + left.front() +
                  ", ...); remove them with moecomm testbed down --name " + name);
    }
    throw Error(where(name) + " is not up (no " + dir + "/state.json)");
  }
  const TestbedSpec spec = read_state(dir);
  nlohmann::json j = to_json(spec);
  j["state_dir"] = dir;
  const std::vector<std::string> present = existing_namespaces();
  const bool may_look = has_network_privileges();  // `ip netns pids` needs root
  bool healthy = true;
  nlohmann::json nss = nlohmann::json::array();
  for (const std::string& ns : spec.namespaces()) {
    const bool here = std::find(present.begin(), present.end(), ns) != present.end();
    healthy = healthy && here;
    nlohmann::json entry = {{"name", ns}, {"present", here}};
    entry["processes"] =
        here && may_look ? nlohmann::json(namespace_pids(ns).size()) : nlohmann::json(nullptr);
    nss.push_back(entry);
  }
  j["namespaces"] = nss;
  j["healthy"] = healthy;
  return j;
}

void print_status(const nlohmann::json& j, std::ostream& out) {
  const TestbedSpec spec = spec_from_json(j, "status");
  print_layout(spec, out);
  out << "  state: " << j["state_dir"].get<std::string>() << "\n";
  out << "  namespace             present  processes  node\n";
  for (const auto& ns : j["namespaces"]) {
    const std::string name = ns["name"];
    std::string node = "fabric";
    for (int k = 0; k < spec.nodes; ++k) {
      if (spec.node_namespace(k) == name) {
        node = spec.node_hostname(k) + " " + spec.node_address(k);
      }
    }
    char line[256];
    const std::string procs = ns["processes"].is_null() ? "-" : ns["processes"].dump();
    std::snprintf(line, sizeof line, "  %-21s %-8s %-10s %s\n", name.c_str(),
                  ns["present"].get<bool>() ? "yes" : "NO", procs.c_str(), node.c_str());
    out << line;
  }
  out << (j["healthy"].get<bool>() ? "healthy\n"
                                   : "BROKEN: namespaces are missing; take it down and bring it "
                                     "up again\n");
}

}  // namespace moecomm::testbed
