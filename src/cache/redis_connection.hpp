#pragma once
// One connection to a Redis server (hiredis), for the fleet's remote cache.
// Every call is bounded by the timeout the connection was made with; a call
// that fails, times out or gets an error reply throws ir::Error (Io) naming
// the server, and leaves the connection unusable.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cache/remote_header.hpp"

struct redisContext;
struct redisReply;

namespace kiln::cache {

// A reply; null for Redis's nil.
struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

class RedisConnection {
 public:
  // Connects (and selects the database) within `timeout_ms`; throws ir::Error (Io) saying why not.
  RedisConnection(const RedisAddress& address, int timeout_ms);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  using Command = std::vector<std::string_view>;
  // Sends every command, then reads every reply (one round trip).
  std::vector<RedisReply> pipeline(const std::vector<Command>& commands);
  // The same in two halves, so that a caller can work on one reply while
  // the next ones travel: each send is answered by one receive per command.
  void send(const std::vector<Command>& commands);
  RedisReply receive(std::string_view command_name);
  RedisReply command(const Command& command);

  // A reply's parts, checked: each throws ir::Error (Io) if the reply is of another type.
  bool is_nil(const RedisReply& r) const;
  std::string_view string(const RedisReply& r) const;  // a bulk string
  long long integer(const RedisReply& r) const;
  // SCAN's reply: the next cursor and the keys.
  std::pair<std::string, std::vector<std::string>> scan(const RedisReply& r) const;

 private:
  [[noreturn]] void fail(const std::string& what) const;
  RedisAddress address_;
  redisContext* context_ = nullptr;
};

}  // namespace kiln::cache
