#pragma once
// Each kiln subcommand registers itself on the app and runs when selected.
#include <CLI/CLI.hpp>

namespace kiln::cli {

// Set by the subcommand's callback; main returns it.
extern int exit_code;

void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);

}  // namespace kiln::cli
