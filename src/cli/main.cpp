// The kiln command. Errors go to stderr as "error: ..." with exit code 1.
#include <iostream>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {
int exit_code = 0;
}

int main(int argc, char** argv) {
  CLI::App app{"kiln: compile and run ONNX models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
  kiln::cli::add_inspect_command(app);
  kiln::cli::add_run_command(app);
  kiln::cli::add_compile_command(app);
  kiln::cli::add_cache_command(app);
  kiln::cli::add_aot_freeze_command(app);
  kiln::cli::add_plugins_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      std::cerr << "error: " << e.what() << "\n";
      std::cerr << "run 'kiln --help' or 'kiln SUBCOMMAND --help' for usage\n";
      return 2;
    }
    return app.exit(e);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return kiln::cli::exit_code;
}
