// Feeds arbitrary bytes to what reads the cache's own files, which anyone
// able to damage a cache directory could have written: the manifest parser
// and the remembered-hash records (read from a real file, as Kiln reads
// them). Neither may crash, hang or allocate without bound.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cache/authenticator.hpp"
#include "cache/cache_dir.hpp"
#include "cache/hash_memo.hpp"
#include "cache/manifest.hpp"

namespace {

struct Scratch {
  std::string path;
  kiln::cache::Fd dir;
  Scratch() {
    char tmpl[] = "/tmp/kiln_cache_files_fuzzer_XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    path = tmpl;
    dir = kiln::cache::open_dir_at(AT_FDCWD, path);
  }
  ~Scratch() {
    ::unlinkat(dir.get(), "record", 0);
    ::rmdir(path.c_str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Scratch scratch;
  static const kiln::cache::Authenticator auth(std::string(32, 'k'));
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  kiln::cache::Manifest manifest;
  if (kiln::cache::parse_manifest(text, manifest).empty()) (void)kiln::cache::to_text(manifest);

  kiln::cache::Fd record = kiln::cache::open_file_at(scratch.dir.get(), "record", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (record && ::write(record.get(), data, size) == ssize_t(size)) {
    struct stat st{};
    ::fstat(record.get(), &st);
    (void)kiln::cache::check_record(scratch.dir.get(), "record", auth);
    (void)kiln::cache::recall_hash(scratch.dir.get(), "record", st, auth);
  }
  return 0;
}
