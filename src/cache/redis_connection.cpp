#include "cache/redis_connection.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "runtime/ir/error.hpp"

namespace kiln::cache {

namespace {

timeval to_timeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

void RedisReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

RedisConnection::RedisConnection(const RedisAddress& address, int timeout_ms) : address_(address) {
  const timeval tv = to_timeval(timeout_ms);
  context_ = address.unix_path.empty() ? redisConnectWithTimeout(address.host.c_str(), address.port, tv)
                                       : redisConnectUnixWithTimeout(address.unix_path.c_str(), tv);
  if (!context_) fail("no memory for a connection");
  if (context_->err) fail(std::string("cannot connect: ") + context_->errstr);
  if (redisSetTimeout(context_, tv) != REDIS_OK) fail("cannot set the timeout");
  if (address.db != 0) {
    const std::string db = std::to_string(address.db);
    command({"SELECT", db});
  }
}

RedisConnection::~RedisConnection() {
  if (context_) redisFree(context_);
}

void RedisConnection::fail(const std::string& what) const {
  ir::fail(ir::ErrorKind::Io, "remote cache " + address_.text + ": " + what);
}

void RedisConnection::send(const std::vector<Command>& commands) {
  if (context_->err) fail(std::string("connection broken: ") + context_->errstr);
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const Command& c : commands) {
    argv.clear();
    lengths.clear();
    for (const auto& a : c) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    if (redisAppendCommandArgv(context_, int(argv.size()), argv.data(), lengths.data()) != REDIS_OK)
      fail(std::string("cannot send: ") + context_->errstr);
  }
}

RedisReply RedisConnection::receive(std::string_view command_name) {
  void* r = nullptr;
  if (redisGetReply(context_, &r) != REDIS_OK || !r)
    fail(context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)
             ? std::string("no answer within the timeout")
             : std::string(context_->errstr[0] ? context_->errstr : "connection lost"));
  RedisReply reply(static_cast<redisReply*>(r));
  if (reply->type == REDIS_REPLY_ERROR) {
    // The connection stays in step, but a server that refuses our commands
    // (out of memory, a read-only replica) is a failing store.
    context_->err = REDIS_ERR_OTHER;
    fail(std::string(command_name) + " failed: " + std::string(reply->str, reply->len));
  }
  return reply;
}

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<Command>& commands) {
  send(commands);
  std::vector<RedisReply> replies;
  for (const Command& c : commands) replies.push_back(receive(c[0]));
  return replies;
}

RedisReply RedisConnection::command(const Command& command) { return std::move(pipeline({command})[0]); }

bool RedisConnection::is_nil(const RedisReply& r) const { return r->type == REDIS_REPLY_NIL; }

std::string_view RedisConnection::string(const RedisReply& r) const {
  if (r->type != REDIS_REPLY_STRING) fail("expected a string, got reply type " + std::to_string(r->type));
  return {r->str, r->len};
}

long long RedisConnection::integer(const RedisReply& r) const {
  if (r->type != REDIS_REPLY_INTEGER) fail("expected an integer, got reply type " + std::to_string(r->type));
  return r->integer;
}

std::pair<std::string, std::vector<std::string>> RedisConnection::scan(const RedisReply& r) const {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_ARRAY)
    fail("SCAN's reply is not a cursor and a list of keys");
  std::pair<std::string, std::vector<std::string>> out{std::string(r->element[0]->str, r->element[0]->len), {}};
  for (size_t i = 0; i < r->element[1]->elements; ++i) {
    const redisReply* k = r->element[1]->element[i];
    if (k->type != REDIS_REPLY_STRING) fail("SCAN returned a key that is not a string");
    out.second.emplace_back(k->str, k->len);
  }
  return out;
}

}  // namespace kiln::cache
