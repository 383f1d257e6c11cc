#pragma once
// An entry's manifest: what the entry is (format, Kiln build, key), what it
// was compiled from, and each file's size and SHA-256. Read from a file that
// anyone able to damage the cache could have written, so reading never
// throws: a field that is missing or of the wrong type makes the whole
// manifest unreadable, and its entry bad.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::cache {

// 2: SHA-256 digests and a tag (1 had XXH3 checksums only).
inline constexpr int kFormatVersion = 2;
// The files of an entry that the manifest describes.
inline constexpr const char* kEntryFiles[] = {"object.o", "program.bin", "weights.bin"};

struct FileRecord {
  int64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

struct Manifest {
  int format = kFormatVersion;
  std::string kiln_build;
  std::string key;
  nlohmann::json key_inputs = nlohmann::json::object();  // cache_key.hpp's Key::readable
  std::string created;                                   // ISO 8601, UTC
  double compile_ms = 0;
  std::map<std::string, FileRecord> files;  // every one of kEntryFiles
  nlohmann::json backend;                   // the backend's summary, for people

  // key_inputs' strings for `kiln cache ls` ("" where absent).
  std::string input(const char* name) const;
};

// Whether JSON text nests arrays and objects at most `max_depth` deep.
// Checked before parsing text from the cache: copying or printing a parsed
// value recurses once per level.
bool nesting_at_most(std::string_view text, int max_depth);

// Parses `text`; "" if it is a manifest of this format, else what is wrong.
std::string parse_manifest(std::string_view text, Manifest& out);
std::string to_text(const Manifest& m);

}  // namespace kiln::cache
