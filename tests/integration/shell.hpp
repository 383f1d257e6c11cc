#pragma once
// What the bundle tests share: shell commands (compilers, qemu, ldd) and
// whole files. In an unnamed namespace: each test file has its own copy.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct Output {
  int code = -1;
  std::string text;  // stdout and stderr
};

Output sh(const std::string& command) {
  Output o;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int status = ::pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

bool have(const std::string& tool) { return sh("command -v " + tool).code == 0; }

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace
