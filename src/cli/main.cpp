// The `moecomm` command: subcommands are registered by their own files under src/cli/.
#include "cli/app.h"

int main(int argc, char** argv) {
  return moecomm::cli::run(argc, argv);
}
