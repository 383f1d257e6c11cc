#include "runtime/ir/environment.hpp"

#include <cstdlib>

#include "runtime/ir/error.hpp"

namespace kiln::env {

namespace {

std::string get(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

[[noreturn]] void bad(const char* name, const std::string& value, const std::string& expected) {
  ir::fail(ir::ErrorKind::InvalidArgument, std::string(name) + "='" + value + "': expected " + expected);
}

}  // namespace

bool cache_off() {
  const std::string v = get("KILN_CACHE");
  return v == "off" || v == "0" || v == "false" || v == "no";
}

std::string cache_dir() { return get("KILN_CACHE_DIR"); }

std::string default_cache_dir() {
  if (const std::string xdg = get("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') return xdg + "/kiln";
  if (const std::string home = get("HOME"); !home.empty()) return home + "/.cache/kiln";
  return "";
}

std::string cache_max_bytes() { return get("KILN_CACHE_MAX_BYTES"); }
std::string cache_key_file() { return get("KILN_CACHE_KEY_FILE"); }
std::string remote_cache() { return get("KILN_REMOTE_CACHE"); }

bool remote_cache_read_only() {
  const std::string v = get("KILN_REMOTE_CACHE_READ_ONLY");
  if (!v.empty() && v != "0" && v != "1") bad("KILN_REMOTE_CACHE_READ_ONLY", v, "0 or 1");
  return v == "1";
}

int remote_cache_ms(const char* name) {
  const std::string var = std::string("KILN_REMOTE_CACHE_") + name + "_MS", v = get(var.c_str());
  if (v.empty()) return 0;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (*end || n <= 0 || n > 3600000) bad(var.c_str(), v, "milliseconds, 1 to 3600000");
  return int(n);
}
std::string plugin_path() { return get("KILN_PLUGIN_PATH"); }
std::string kernels() { return get("KILN_KERNELS"); }
std::string profile() { return get("KILN_PROFILE"); }

bool winograd() {
  const std::string v = get("KILN_WINOGRAD");
  if (v.empty()) return true;
  if (v != "0" && v != "1") bad("KILN_WINOGRAD", v, "0 or 1");
  return v == "1";
}

int64_t channel_blocks_from() {
  const std::string v = get("KILN_CHANNEL_BLOCKS_FROM");
  if (v.empty()) return int64_t(6) << 20;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (*end || n < 0) bad("KILN_CHANNEL_BLOCKS_FROM", v, "a number of bytes");
  return int64_t(n);
}

std::string implementation_trials() {
  const std::string v = get("KILN_IMPLEMENTATION_TRIALS");
  if (v.empty()) return "timed";
  if (v != "off" && v != "timed" && v != "other") bad("KILN_IMPLEMENTATION_TRIALS", v, "off, timed or other");
  return v;
}

}  // namespace kiln::env
