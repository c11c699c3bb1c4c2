#include "cli/app.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <new>

#include "cli/bench_command.h"
#include "cli/infer_command.h"
#include "cli/place_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/sim_command.h"
#include "cli/testbed_command.h"
#include "cli/train_command.h"
#include "core/error.h"

namespace moecomm::cli {

namespace {

constexpr const char* kAbout =
    "moecomm: fast communication for Mixture-of-Experts training and inference.\n"
    "Implements MoNTA, NetMoE, FSMoE, HybridEP and Lina as knobs of one strategy.";

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(kAbout, "moecomm");
  app.require_subcommand(1);
  app.set_version_flag("--version", "moecomm 0.1.0");
  PlanCommand plan(app);
  PlaceCommand place(app);
  SimCommand sim(app);
  TrainCommand train(app);
  InferCommand infer(app);
  TestbedCommand testbed(app);
  ProfileCommand profile(app);
  BenchCommand bench(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "error: " << e.what() << "\nRun 'moecomm --help' for usage.\n";
    return 2;
  }
  try {
    if (plan.selected()) return plan.run(out, err);
    if (place.selected()) return place.run(out, err);
    if (sim.selected()) return sim.run(out, err);
    if (train.selected()) return train.run(out, err);
    if (infer.selected()) return infer.run(out, err);
    if (testbed.selected()) return testbed.run(out, err);
    if (profile.selected()) return profile.run(out, err);
    if (bench.selected()) return bench.run(out, err);
  } catch (const moecomm::Error& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // The guards estimate work before allocating; what slips past them is still the input's
    // size, which the user can reduce.
    err << "error: out of memory: the input is too large for this machine; reduce its sizes "
           "(layers, experts, samples, tokens, iterations, chunks or ranks)\n";
    return 2;
  } catch (const std::exception& e) {  // a bug, not bad input; still no crash
    err << "error: internal: " << e.what() << "\n";
    return 3;
  }
  err << "error: no subcommand\n";
  return 2;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return run(args, std::cout, std::cerr);
}

}  // namespace moecomm::cli
