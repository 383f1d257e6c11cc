// kiln cache ls|verify|prune|clear: looks after the cache directory.
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct CacheArgs {
  std::string dir;
  bool json = false;
  bool check = false;
  int64_t max_bytes = -1;
};

Cache open_cache(const CacheArgs& args) {
  RuntimeOptions opts;
  opts.cache_dir = args.dir;
  opts.threads = 1;
  return Cache(Runtime(opts));
}

std::string local_time(int64_t t) {
  if (t == 0) return "-";
  char buf[32];
  std::tm tm{};
  const std::time_t tt = std::time_t(t);
  localtime_r(&tt, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

nlohmann::json to_json(const CacheEntry& e) {
  return {{"key", e.key},     {"model", e.model},     {"shapes", e.shapes},     {"backend", e.backend},
          {"bytes", e.bytes}, {"created", e.created}, {"last_use", e.last_use}, {"problem", e.problem}};
}

void print(const std::vector<CacheEntry>& entries, bool json, const std::string& dir) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) out.push_back(to_json(e));
    std::cout << out.dump(2) << "\n";
    return;
  }
  int64_t total = 0;
  for (const auto& e : entries) {
    total += e.bytes;
    // The backend identity is long (CPU features): its first word says enough here.
    std::printf("%s  %-10s  %s  %s  %s  %s%s%s\n", e.key.substr(0, 12).c_str(), bytes_to_string(e.bytes).c_str(),
                local_time(e.last_use).c_str(), e.model.c_str(), e.shapes.c_str(), e.backend.substr(0, e.backend.find(' ')).c_str(),
                e.problem.empty() ? "" : "  BAD: ", e.problem.c_str());
  }
  std::printf("%zu entries, %s in %s\n", entries.size(), bytes_to_string(total).c_str(), dir.c_str());
}

}  // namespace

void add_cache_command(CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  auto* cmd = app.add_subcommand("cache", "Inspect and look after the cache of compiled code");
  cmd->require_subcommand(1);
  cmd->add_option("--cache-dir", args->dir, "cache directory (default: $KILN_CACHE_DIR, else ~/.cache/kiln)");

  auto* ls = cmd->add_subcommand("ls", "List entries: model, shapes, backend, size, last use (most recent first)");
  ls->add_flag("--json", args->json, "print JSON");
  ls->add_flag("--check", args->check, "verify every checksum too (reads every file)");
  ls->callback([args] {
    Cache cache = open_cache(*args);
    print(cache.list(args->check), args->json, cache.dir());
  });

  auto* verify = cmd->add_subcommand("verify", "Check every entry; report and remove the unusable ones");
  verify->add_flag("--json", args->json, "print JSON");
  verify->callback([args] {
    Cache cache = open_cache(*args);
    const auto bad = cache.verify();
    if (args->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& e : bad) out.push_back(to_json(e));
      std::cout << out.dump(2) << "\n";
      return;
    }
    for (const auto& e : bad) std::printf("removed %s (%s %s): %s\n", e.key.c_str(), e.model.c_str(), e.shapes.c_str(), e.problem.c_str());
    std::printf("%zu bad entries removed; %zu entries remain\n", bad.size(), cache.list().size());
  });

  auto* prune = cmd->add_subcommand("prune", "Remove least recently used entries until the cache fits");
  prune->add_option("--max-bytes", args->max_bytes, "size to fit in")->required()->check(CLI::NonNegativeNumber);
  prune->callback([args] {
    Cache cache = open_cache(*args);
    const int64_t removed = cache.prune(args->max_bytes);
    int64_t total = 0;
    for (const auto& e : cache.list()) total += e.bytes;
    std::printf("%lld entries removed; %s remain\n", static_cast<long long>(removed), bytes_to_string(total).c_str());
  });

  auto* clear = cmd->add_subcommand("clear", "Remove every entry and remembered model hash (entries in use by a running process stay)");
  clear->callback([args] {
    Cache cache = open_cache(*args);
    std::printf("%lld entries removed\n", static_cast<long long>(cache.clear()));
  });
}

}  // namespace kiln::cli
