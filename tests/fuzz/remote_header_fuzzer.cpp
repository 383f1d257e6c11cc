// Feeds arbitrary bytes to what the remote cache reads before it trusts
// anything: an entry's header as Redis returns it (anyone who can write to
// the store could have put it there) and the store's address. Neither may
// crash, hang or allocate without bound; a header that parses must print
// and parse again to the same fields.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cache/remote_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::cache::RemoteHeader h;
  if (kiln::cache::parse_remote_header(text, h).empty()) {
    kiln::cache::RemoteHeader again;
    if (!kiln::cache::parse_remote_header(kiln::cache::to_text(h), again).empty() || again.gen != h.gen ||
        again.chunks != h.chunks || again.manifest != h.manifest || again.tag != h.tag)
      std::abort();
  }
  kiln::cache::RedisAddress address;
  if (kiln::cache::parse_redis_url(text, address).empty() && address.host.empty() == address.unix_path.empty()) std::abort();
  return 0;
}
