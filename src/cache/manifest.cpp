#include "cache/manifest.hpp"

namespace kiln::cache {

using nlohmann::json;

namespace {

bool is_digest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

bool nesting_at_most(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::string Manifest::input(const char* name) const {
  const auto it = key_inputs.find(name);
  return it != key_inputs.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string parse_manifest(std::string_view text, Manifest& out) {
  if (!nesting_at_most(text, 16)) return "manifest nests more than 16 levels deep";
  const json m = json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.is_object()) return "manifest is not a JSON object";
  auto field = [&](const char* name) -> const json* {
    const auto it = m.find(name);
    return it == m.end() ? nullptr : &*it;
  };
  // Older formats first, so that a stale entry says so rather than which field it lacks.
  const json* format = field("format");
  if (!format || !format->is_number_integer()) return "manifest has no integer 'format'";
  if (format->get<int64_t>() != kFormatVersion)
    return "format version " + format->dump() + ", this Kiln reads " + std::to_string(kFormatVersion);
  out.format = kFormatVersion;
  for (auto [name, to] : {std::pair{"kiln_build", &out.kiln_build}, {"key", &out.key}, {"created", &out.created}}) {
    const json* f = field(name);
    if (!f || !f->is_string()) return std::string("manifest field '") + name + "' is not a string";
    *to = f->get<std::string>();
  }
  const json* inputs = field("key_inputs");
  if (!inputs || !inputs->is_object()) return "manifest field 'key_inputs' is not an object";
  out.key_inputs = *inputs;
  const json* ms = field("compile_ms");
  if (!ms || !ms->is_number()) return "manifest field 'compile_ms' is not a number";
  out.compile_ms = ms->get<double>();
  const json* backend = field("backend");
  out.backend = backend ? *backend : json(nullptr);
  const json* files = field("files");
  if (!files || !files->is_object()) return "manifest field 'files' is not an object";
  out.files.clear();
  for (const char* name : kEntryFiles) {
    const auto f = files->find(name);
    if (f == files->end() || !f->is_object()) return std::string("manifest does not describe ") + name;
    const auto bytes = f->find("bytes"), sha = f->find("sha256");
    if (bytes == f->end() || !bytes->is_number_integer() || bytes->get<int64_t>() < 0)
      return std::string("manifest gives ") + name + " no size";
    if (sha == f->end() || !sha->is_string() || !is_digest(sha->get<std::string>()))
      return std::string("manifest gives ") + name + " no SHA-256";
    out.files[name] = {bytes->get<int64_t>(), sha->get<std::string>()};
  }
  if (files->size() != std::size(kEntryFiles)) return "manifest describes files that are not part of an entry";
  return "";
}

std::string to_text(const Manifest& m) {
  json files = json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
  return json({{"format", m.format},
               {"kiln_build", m.kiln_build},
               {"key", m.key},
               {"key_inputs", m.key_inputs},
               {"created", m.created},
               {"compile_ms", m.compile_ms},
               {"files", files},
               {"backend", m.backend}})
      .dump(1);
}

}  // namespace kiln::cache
