#pragma once
// Each kiln subcommand registers itself on the app and runs when selected.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln {
struct TensorInfo;
class Model;
}  // namespace kiln

namespace kiln::cli {

// Set by the subcommand's callback; main returns it.
extern int exit_code;

void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_compile_command(CLI::App& app);
void add_cache_command(CLI::App& app);
void add_pull_command(CLI::App& cache);  // kiln cache pull
void add_aot_freeze_command(CLI::App& app);
void add_plugins_command(CLI::App& app);

// "NAME=VALUE" split at the first '='; InvalidArgument naming `option` otherwise.
std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option);
// A non-negative integer; InvalidArgument naming `what` otherwise.
int64_t parse_size(const std::string& text, const std::string& what);
// "1x3x224x224" (or "scalar"); InvalidArgument naming `what` otherwise.
std::vector<int64_t> parse_shape(const std::string& text, const std::string& what);
// --dim SYMBOL=VALUE options. A symbol no input of `inputs` has gets a
// warning (misspelt, it would silently leave its dimension at 1); scripts
// may pass one set of values to many models.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& options, const std::vector<TensorInfo>& inputs);
// The shape of each input without a default: --shape NAME=DIMS options
// first, else its declared shape with --dim values for its symbols.
// InvalidArgument naming the input and the option to pass otherwise.
std::vector<std::pair<std::string, std::vector<int64_t>>> input_shapes(const Model& model,
                                                                       const std::vector<std::string>& shape_options,
                                                                       const std::map<std::string, int64_t>& dims);
// "12.0 KiB", "3.52 MiB".
std::string bytes_to_string(int64_t bytes);

}  // namespace kiln::cli
