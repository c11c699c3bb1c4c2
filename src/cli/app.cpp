#include "cli/app.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
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

// This process's rank as its MPI launcher numbers it (Open MPI, MPICH/Hydra and Intel MPI,
// PMIx, Slurm's srun), 0 when none launched it. Help and version are printed before MPI starts,
// so under `mpirun -np 4 moecomm train --help` only the launcher says which rank this is.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* text = std::getenv(name); text && *text) return std::atoi(text);
  }
  return 0;
}

// Every option shows its default in --help as CLI11 captured it from the variable, except
// where that value is not one a user would give: a required option's, an empty list's, and a
// stand-in such as 0 that means "the model's", which the description then states in words
// ("(default: the model's)") and which would contradict it.
void show_defaults(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_required() || option->get_default_str() == "[]" ||
        option->get_description().find("default") != std::string::npos)
      option->default_str("");
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) show_defaults(*sub);
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(kAbout, "moecomm");
  // Every option's default shows in --help; subcommands inherit this when they are added.
  app.option_defaults()->always_capture_default();
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
  show_defaults(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  // Under mpirun every rank parses the same arguments: help and version come from rank 0 only.
  const bool quiet = launcher_rank() != 0;
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    if (!quiet) out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    if (!quiet) out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    if (!quiet) out << e.what() << "\n";
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
