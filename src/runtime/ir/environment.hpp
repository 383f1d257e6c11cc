#pragma once
// Every setting Kiln reads from the environment is read here and nowhere
// else; the README's "Environment variables" table lists the same names.
// Each function reads its variable when called (an empty one is unset) and
// checks its value; what a caller caches, and whether an option given in
// code wins, is the caller's business.
#include <cstdint>
#include <string>

namespace kiln::env {

bool cache_off();                 // KILN_CACHE is off, 0, false or no
std::string cache_dir();          // KILN_CACHE_DIR
std::string default_cache_dir();  // $XDG_CACHE_HOME/kiln if absolute, else $HOME/.cache/kiln, else ""
std::string cache_max_bytes();    // KILN_CACHE_MAX_BYTES, unparsed: a bad one costs the Runtime a warning
std::string cache_key_file();     // KILN_CACHE_KEY_FILE
std::string remote_cache();       // KILN_REMOTE_CACHE
bool remote_cache_read_only();    // KILN_REMOTE_CACHE_READ_ONLY is 1 (0 or unset: no; else an error)
// KILN_REMOTE_CACHE_<NAME>_MS as a positive number of milliseconds; 0 if unset; an error otherwise.
int remote_cache_ms(const char* name);
std::string plugin_path();  // KILN_PLUGIN_PATH
std::string kernels();      // KILN_KERNELS
std::string profile();      // KILN_PROFILE
// The cpu backend's tuning. A bad value throws ir::Error(InvalidArgument).
bool winograd();                      // KILN_WINOGRAD: 0 or 1 (default 1)
int64_t channel_blocks_from();        // KILN_CHANNEL_BLOCKS_FROM: bytes (default 6 MiB)
std::string implementation_trials();  // KILN_IMPLEMENTATION_TRIALS: off, timed (default) or other

}  // namespace kiln::env
