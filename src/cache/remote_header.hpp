#pragma once
// What the remote tier reads from Redis before it trusts anything: an
// entry's header (JSON: which upload its chunks belong to, how many there
// are, the entry's manifest and its tag) and the store's address. Apart
// from the Redis client so that their fuzz target (remote_header) builds
// with nothing else.
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cache {

struct RemoteHeader {
  std::string gen;  // the upload's name: its chunks are c:KEY:GEN:I
  uint64_t chunks = 0;
  std::string manifest, tag;
};
// "" if `text` is a header, else what is wrong. Bounded: at most 2 MiB.
std::string parse_remote_header(std::string_view text, RemoteHeader& out);
std::string to_text(const RemoteHeader& h);

struct RedisAddress {
  std::string host;  // empty for a Unix socket
  int port = 6379;
  std::string unix_path;  // unix://PATH
  int db = 0;
  std::string text;  // as given, for messages
};
// Parses redis://HOST[:PORT][/DB] or unix://PATH[?db=N]; "" if it is
// well-formed, else what is wrong.
std::string parse_redis_url(const std::string& url, RedisAddress& out);

}  // namespace kiln::cache
