#pragma once
// What makes a cache entry trustworthy beyond its directory's permissions:
// SHA-256 digests of its files and an HMAC-SHA256 tag over its manifest, and
// the same tag on every remembered hash (OpenSSL's libcrypto for both).
//
// The secret is the content of the key file a shared cache names
// (KILN_CACHE_KEY_FILE), or, for a private cache, random bytes Kiln keeps in
// the cache directory itself: there the tag guards against damage and stray
// edits rather than other users, whom the directory's permissions keep out.
#include <string>
#include <string_view>

namespace kiln::cache {

// SHA-256 of bytes, as 64 hex digits.
std::string sha256_hex(const void* data, size_t size);

// The same over bytes that come in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex();  // once, at the end

 private:
  void* ctx_;
};

class Authenticator {
 public:
  // At least kMinSecretBytes bytes.
  explicit Authenticator(std::string secret);
  static constexpr size_t kMinSecretBytes = 16;

  // HMAC-SHA256 of `message`, as 64 hex digits. `purpose` keeps tags made
  // for one kind of thing from being valid for another.
  std::string tag(std::string_view purpose, std::string_view message) const;
  // In constant time.
  bool verify(std::string_view purpose, std::string_view message, std::string_view tag_hex) const;
  // A short name for the secret that does not reveal it (for messages).
  std::string fingerprint() const;

 private:
  std::string secret_;
};

// n bytes from OpenSSL's random generator (a private cache's new secret).
std::string random_bytes(size_t n);

// Reads a shared cache's key file. Throws ir::Error (InvalidArgument) with
// what is wrong: not a regular file, writable by others than its owner,
// readable by everyone, shorter than kMinSecretBytes or larger than 4 KiB.
std::string read_key_file(const std::string& path);

}  // namespace kiln::cache
