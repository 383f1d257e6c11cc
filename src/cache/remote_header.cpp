#include "cache/remote_header.hpp"

#include <charconv>

#include <nlohmann/json.hpp>

#include "cache/manifest.hpp"

namespace kiln::cache {

using nlohmann::json;

namespace {

bool parse_int(std::string_view s, int& out, int lo, int hi) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

std::string parse_redis_url(const std::string& url, RedisAddress& out) {
  out = RedisAddress{};
  out.text = url;
  const std::string expected = "; expected redis://HOST[:PORT][/DB] or unix://PATH[?db=N]";
  std::string_view rest(url);
  if (rest.rfind("unix://", 0) == 0) {
    rest.remove_prefix(7);
    if (const size_t q = rest.find("?db="); q != std::string_view::npos) {
      if (!parse_int(rest.substr(q + 4), out.db, 0, 1 << 20)) return "'" + url + "': the database is not a number" + expected;
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') return "'" + url + "': the socket's path must be absolute" + expected;
    out.unix_path = std::string(rest);
    return "";
  }
  if (rest.rfind("redis://", 0) != 0) return "'" + url + "' is not a Redis address" + expected;
  rest.remove_prefix(8);
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (!parse_int(rest.substr(slash + 1), out.db, 0, 1 << 20)) return "'" + url + "': the database is not a number" + expected;
    rest = rest.substr(0, slash);
  }
  if (rest.find('@') != std::string_view::npos)
    return "'" + url + "': credentials in the address are not supported (use a Unix socket or a private network)";
  // A port follows the last ':' outside an IPv6 address's brackets.
  const size_t colon = rest.rfind(':'), close = rest.rfind(']');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    if (!parse_int(rest.substr(colon + 1), out.port, 1, 65535)) return "'" + url + "': the port is not 1 to 65535" + expected;
    rest = rest.substr(0, colon);
  }
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) return "'" + url + "' names no host" + expected;
  out.host = std::string(rest);
  return "";
}

std::string parse_remote_header(std::string_view text, RemoteHeader& out) {
  if (text.size() > (size_t(2) << 20)) return "its header is larger than 2 MiB";
  if (!nesting_at_most(text, 4)) return "its header nests too deep";
  const json h = json::parse(text, nullptr, false);
  auto string = [&](const char* name, std::string& to) {
    const auto it = h.find(name);
    if (it == h.end() || !it->is_string()) return false;
    to = it->get<std::string>();
    return true;
  };
  if (!h.is_object() || !string("gen", out.gen) || !string("manifest", out.manifest) || !string("tag", out.tag) ||
      !h.contains("chunks") || !h["chunks"].is_number_unsigned())
    return "its header is not {gen, chunks, manifest, tag}";
  out.chunks = h["chunks"].get<uint64_t>();
  return "";
}

std::string to_text(const RemoteHeader& h) {
  return json{{"gen", h.gen}, {"chunks", h.chunks}, {"manifest", h.manifest}, {"tag", h.tag}}.dump();
}

}  // namespace kiln::cache
