// kiln cache ls|verify|prune|clear|push|pull: looks after the cache
// directory, and with --remote the fleet's remote tier.
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
  bool remote = false;
};

Cache open_cache(const CacheArgs& args) {
  RuntimeOptions opts;
  opts.cache_dir = args.dir;
  opts.threads = 1;
  opts.log_level = LogLevel::Error;  // a cache it cannot use is Cache's error here, not a warning about compiling
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
  nlohmann::json j = {{"key", e.key},     {"model", e.model},     {"shapes", e.shapes},     {"backend", e.backend},
                      {"bytes", e.bytes}, {"created", e.created}, {"last_use", e.last_use}, {"problem", e.problem}};
  if (!e.problem.empty()) j["removed"] = e.not_removed.empty();
  if (!e.not_removed.empty()) j["not_removed"] = e.not_removed;
  return j;
}

void print(const std::vector<CacheEntry>& entries, bool json, const std::string& dir, const int64_t* refused = nullptr) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) out.push_back(to_json(e));
    if (refused) out = {{"entries", out}, {"refused", *refused}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  int64_t total = 0;
  for (const auto& e : entries) {
    total += e.bytes;
    // The backend identity is long (CPU features): its first word says enough here.
    std::printf("%s  %-10s  %s  %s  %s  %s%s%s\n", e.key.substr(0, 12).c_str(), bytes_to_string(e.bytes).c_str(),
                local_time(e.last_use).c_str(), e.model.c_str(), e.shapes.c_str(),
                e.backend.substr(0, e.backend.find(' ')).c_str(), e.problem.empty() ? "" : "  BAD: ", e.problem.c_str());
  }
  std::printf("%zu entries, %s in %s\n", entries.size(), bytes_to_string(total).c_str(), dir.c_str());
  if (refused) std::printf("%lld entries refused by hosts (they did not verify)\n", static_cast<long long>(*refused));
}

void print_remote(const Cache::Remote& r, bool json) { print(r.entries, json, r.url, &r.refused); }

}  // namespace

void add_cache_command(CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  auto* cmd = app.add_subcommand("cache", "Inspect and look after the cache of compiled code");
  cmd->require_subcommand(1);
  cmd->add_option("--cache-dir", args->dir, "cache directory (default: $KILN_CACHE_DIR, else ~/.cache/kiln)");
  // Subcommands inherit this: `cache ls --cache-dir DIR` (the documented form) passes the option up.
  cmd->fallthrough();

  auto* ls = cmd->add_subcommand("ls", "List entries: model, shapes, backend, size, last use (most recent first)");
  ls->add_flag("--json", args->json, "print JSON");
  ls->add_flag("--check", args->check, "verify every checksum too (reads every file)");
  ls->add_flag("--remote", args->remote, "the remote tier ($KILN_REMOTE_CACHE), and how many entries hosts refused");
  ls->callback([args] {
    Cache cache = open_cache(*args);
    if (args->remote)
      print_remote(cache.remote(args->check), args->json);
    else
      print(cache.list(args->check), args->json, cache.dir());
  });

  auto* verify = cmd->add_subcommand(
      "verify", "Check every entry and remembered hash; report and remove the unusable ones (exit 1 if one stays)");
  verify->add_flag("--json", args->json, "print JSON");
  verify->add_flag("--remote", args->remote, "fetch and check every entry of the remote tier; remove those that do not verify");
  verify->callback([args] {
    Cache cache = open_cache(*args);
    if (args->remote) {
      // Fetching checks each entry whole and removes one that does not verify.
      const Cache::Remote r = cache.remote(true);
      print_remote(r, args->json);
      return;
    }
    const Cache::VerifyResult bad = cache.verify();
    if (!bad.all_removed()) exit_code = 1;
    if (args->json) {
      nlohmann::json entries = nlohmann::json::array();
      for (const auto& e : bad.entries) entries.push_back(to_json(e));
      std::cout << nlohmann::json({{"entries", entries}, {"hashes", bad.hashes}}).dump(2) << "\n";
      return;
    }
    size_t removed = 0;
    for (const auto& e : bad.entries) {
      if (e.not_removed.empty()) {
        ++removed;
        std::printf("removed %s (%s %s): %s\n", e.key.c_str(), e.model.c_str(), e.shapes.c_str(), e.problem.c_str());
      } else {
        std::printf("NOT removed %s (%s %s): %s; cannot remove it: %s\n", e.key.c_str(), e.model.c_str(), e.shapes.c_str(),
                    e.problem.c_str(), e.not_removed.c_str());
      }
    }
    for (const auto& h : bad.hashes) std::printf("removed remembered hash %s\n", h.c_str());
    std::printf("%zu bad entries removed, %zu could not be; %zu bad remembered hashes removed; %zu entries remain\n", removed,
                bad.entries.size() - removed, bad.hashes.size(), cache.list().size());
  });

  auto* prune = cmd->add_subcommand("prune", "Remove least recently used entries until the cache fits");
  prune->add_option("--max-bytes", args->max_bytes, "size to fit in (required without --remote)")->check(CLI::NonNegativeNumber);
  prune->add_flag("--remote", args->remote,
                  "remove the remote tier's entries that do not verify or are another build's, and orphaned chunks");
  prune->callback([args] {
    Cache cache = open_cache(*args);
    if (args->remote) {
      std::printf("%lld remote entries and chunks removed\n", static_cast<long long>(cache.prune_remote()));
      return;
    }
    if (args->max_bytes < 0) throw CLI::RequiredError("--max-bytes");
    const int64_t removed = cache.prune(args->max_bytes);
    int64_t total = 0;
    for (const auto& e : cache.list()) total += e.bytes;
    std::printf("%lld entries removed; %s remain\n", static_cast<long long>(removed), bytes_to_string(total).c_str());
  });

  auto* clear =
      cmd->add_subcommand("clear", "Remove every entry and remembered model hash (entries in use by a running process stay)");
  clear->callback([args] {
    Cache cache = open_cache(*args);
    std::printf("%lld entries removed\n", static_cast<long long>(cache.clear()));
  });

  auto* push = cmd->add_subcommand("push", "Upload every local entry the remote tier ($KILN_REMOTE_CACHE) lacks");
  push->callback([args] {
    Cache cache = open_cache(*args);
    std::printf("%lld entries uploaded\n", static_cast<long long>(cache.push()));
  });
  add_pull_command(*cmd);
}

}  // namespace kiln::cli
