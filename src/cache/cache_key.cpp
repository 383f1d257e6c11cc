#include "cache/cache_key.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <new>

#include "runtime/ir/file_hash.hpp"

namespace kiln::cache {

namespace {

std::string to_hex(XXH128_hash_t hash) {
  XXH128_canonical_t digest;
  XXH128_canonicalFromHash(&digest, hash);
  return ir::hex_digest(digest.digest, sizeof digest.digest);
}

}  // namespace

std::string hash_hex(const void* data, size_t size) { return to_hex(XXH3_128bits(data, size)); }

Hasher::Hasher() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher::~Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher::update(const void* data, size_t size) { XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size); }
std::string Hasher::hex() const { return to_hex(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

namespace {

struct BuildIdSearch {
  uintptr_t address;
  std::string id;
};

// Finds the loaded object that holds `address` and reads its NT_GNU_BUILD_ID note.
int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<BuildIdSearch*>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && search->address >= start && search->address < start + ph.p_memsz) holds = true;
  }
  if (!holds) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + note->n_descsz <= end) {
        search->id = hash_hex(desc, note->n_descsz);
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // the right object, without a build-id
}

}  // namespace

const std::string& build_id() {
  static const std::string id = [] {
    BuildIdSearch search{reinterpret_cast<uintptr_t>(&find_build_id), {}};
    dl_iterate_phdr(find_build_id, &search);
    if (!search.id.empty()) return "build-id:" + search.id;
    // No build-id note: the file's bytes identify the build.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&find_build_id), &info) && info.dli_fname) {
      std::ifstream in(info.dli_fname, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!bytes.empty()) return "file:" + hash_hex(bytes.data(), bytes.size());
    }
    return std::string();  // unknown: the runtime then keeps no cache
  }();
  return id;
}

Key make_key(const KeyInputs& in) {
  Key key;
  key.readable = {{"model", in.model_source},
                  {"model_hash", in.model_hash},
                  {"shapes", in.specialization},
                  {"backend", in.backend_identity},
                  {"kiln_build", build_id()}};
  const std::string hashed = nlohmann::json::array({in.model_hash, in.specialization, in.backend_identity, build_id()}).dump();
  key.hex = hash_hex(hashed.data(), hashed.size());
  return key;
}

}  // namespace kiln::cache
