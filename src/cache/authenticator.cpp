#include "cache/authenticator.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "cache/cache_dir.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/file_hash.hpp"

namespace kiln::cache {

namespace {

constexpr size_t kMaxKeyFileBytes = 4096;

// OpenSSL reads the system's openssl.cnf on first use unless told not to: 2-6
// ms of every warm start here, for settings Kiln's digests do not need (then
// 1.7 ms are left, its default provider starting).
void start_openssl() {
  static const bool started = OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr) == 1;
  (void)started;
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  Sha256 sha;
  sha.update(data, size);
  return sha.hex();
}

Sha256::Sha256() : ctx_((start_openssl(), EVP_MD_CTX_new())) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::update(const void* data, size_t size) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size); }
std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &n);
  return ir::hex_digest(digest, n);
}

Authenticator::Authenticator(std::string secret) : secret_(std::move(secret)) {
  if (secret_.size() < kMinSecretBytes)
    ir::fail(ir::ErrorKind::Internal, "cache: a secret of " + std::to_string(secret_.size()) + " bytes is too short");
}

std::string Authenticator::tag(std::string_view purpose, std::string_view message) const {
  // purpose, a zero byte, then the message: no two (purpose, message) pairs
  // share the bytes a tag is made over.
  std::string bytes;
  bytes.reserve(purpose.size() + 1 + message.size());
  bytes.append(purpose).push_back('\0');
  bytes.append(message);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  start_openssl();
  if (!HMAC(EVP_sha256(), secret_.data(), int(secret_.size()), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
            mac, &n))
    throw std::bad_alloc();
  return ir::hex_digest(mac, n);
}

bool Authenticator::verify(std::string_view purpose, std::string_view message, std::string_view tag_hex) const {
  const std::string want = tag(purpose, message);
  return tag_hex.size() == want.size() && CRYPTO_memcmp(want.data(), tag_hex.data(), want.size()) == 0;
}

std::string Authenticator::fingerprint() const { return tag("kiln key fingerprint", "").substr(0, 12); }

std::string random_bytes(size_t n) {
  std::string bytes(n, '\0');
  start_openssl();
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), int(n)) != 1)
    ir::fail(ir::ErrorKind::Io, "cache: the system's random generator failed");
  return bytes;
}

std::string read_key_file(const std::string& path) {
  auto bad = [&](const std::string& why) -> std::string {
    ir::fail(ir::ErrorKind::InvalidArgument, "cache key file '" + path + "' (KILN_CACHE_KEY_FILE) " + why);
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat st{};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return bad(std::string("cannot be opened: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file");
  // As ssh treats a private key: whoever could change it could make tags.
  if (st.st_uid != ::geteuid() && st.st_uid != 0) return bad("belongs to another user (uid " + std::to_string(st.st_uid) + ")");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return bad("is writable by group or others (chmod go-w)");
  if (st.st_mode & S_IROTH) return bad("is readable by everyone (chmod o-r)");
  if (st.st_size < off_t(Authenticator::kMinSecretBytes) || st.st_size > off_t(kMaxKeyFileBytes))
    return bad("has " + std::to_string(st.st_size) + " bytes; a key has " + std::to_string(Authenticator::kMinSecretBytes) +
               " to " + std::to_string(kMaxKeyFileBytes) + " (e.g. `head -c 32 /dev/urandom > FILE`)");
  std::string secret;
  if (!read_all(fd.get(), secret, kMaxKeyFileBytes) || secret.size() < Authenticator::kMinSecretBytes)
    return bad("could not be read whole");
  return secret;
}

}  // namespace kiln::cache
