#pragma once
// What the cache's integration tests share: the real `kiln` command run in
// child processes, each test on a fresh directory. In an unnamed namespace:
// each test file has its own copy, and its own fixture names.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/kiln.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kModel = std::string(KILN_SOURCE_DIR) + "/examples/digits/digits.onnx";
const std::string kDigit = std::string(KILN_SOURCE_DIR) + "/examples/digits/digit.npy";

struct Result {
  int code = -1;
  std::string out, err;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Changes the byte at `at` in place (XOR with `mask`).
void flip_bits(const fs::path& p, int64_t at, char mask) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(char(c ^ mask));
}

// The tag Kiln writes beside a manifest (src/cache/store.cpp): HMAC-SHA256,
// keyed by the cache's secret, of "kiln cache manifest 2", a zero byte and
// the manifest.
std::string manifest_tag(const std::string& secret, const std::string& manifest) {
  std::string message = std::string("kiln cache manifest 2") + '\0' + manifest;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret.data(), int(secret.size()), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &n);
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < n; ++i) hex += {digits[mac[i] >> 4], digits[mac[i] & 15]};
  return hex;
}

class Child {
 public:
  // Runs `kiln args...` with extra environment variables; stdout and stderr go to files.
  Child(const std::vector<std::string>& args, const std::vector<std::string>& env, const fs::path& scratch) {
    static int count = 0;
    out_ = scratch / ("out_" + std::to_string(::getpid()) + "_" + std::to_string(count));
    err_ = scratch / ("err_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      ::unsetenv("KILN_CACHE");  // ctest may turn the cache off for other tests
      if (!std::freopen(out_.c_str(), "w", stdout) || !std::freopen(err_.c_str(), "w", stderr)) ::_exit(126);
      std::vector<char*> argv{const_cast<char*>(KILN_CLI_PATH)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(KILN_CLI_PATH, argv.data());
      ::_exit(127);
    }
  }
  Result wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(out_);
    r.err = read_file(err_);
    fs::remove(out_);
    fs::remove(err_);
    return r;
  }
  void kill() { ::kill(pid_, SIGKILL); }

 private:
  pid_t pid_ = -1;
  fs::path out_, err_;
};

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::path(::testing::TempDir()) / ("kiln_cache_test_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = root_ / "cache";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, ec);
    for (auto& p : fs::recursive_directory_iterator(root_, ec))
      fs::permissions(p.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }

  Result kiln(std::vector<std::string> args, std::vector<std::string> env = {}) {
    env.push_back("KILN_CACHE_DIR=" + dir_.string());
    return Child(args, env, root_).wait();
  }

  // `kiln run` on the digit at batch 1 (or random inputs at another batch),
  // its JSON summary; the output goes to `out_dir` when given.
  json run(int batch = 1, const std::string& out_dir = "", std::vector<std::string> env = {}) {
    std::vector<std::string> args{"run", kModel, "--json", "--threads", std::to_string(threads_)};
    if (batch == 1)
      args.insert(args.end(), {"--input", "image=" + kDigit});
    else
      args.insert(args.end(), {"--random-inputs", "--dim", "batch=" + std::to_string(batch)});
    if (!out_dir.empty()) args.insert(args.end(), {"--output-dir", out_dir});
    Result r = kiln(args, env);
    EXPECT_EQ(r.code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    last_err_ = r.err;
    return j;
  }

  static std::string outcome(const json& j) { return j["specializations"][0]["cache"].get<std::string>(); }

  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(dir_ / "entries", ec)) out.push_back(d.path());
    return out;
  }

  static int64_t entry_bytes(const fs::path& entry) {
    int64_t total = 0;
    for (const auto& f : fs::directory_iterator(entry)) total += int64_t(f.file_size());
    return total;
  }

  std::string digit_output() {
    const fs::path out = root_ / ("digit_out_" + std::to_string(outputs_++));
    run(1, out.string());
    return read_file(out / "probabilities.npy");
  }

  // Replaces an entry's manifest and tags it as Kiln would with `secret`
  // (default: the private cache's own).
  void write_tagged_manifest(const fs::path& entry, const std::string& text, std::string secret = "") const {
    if (secret.empty()) secret = read_file(dir_ / "secret");
    std::ofstream(entry / "manifest.json", std::ios::trunc) << text;
    std::ofstream(entry / "manifest.tag", std::ios::trunc) << manifest_tag(secret, text);
  }

  fs::path root_, dir_;
  std::string last_err_;
  int threads_ = 1;
  int outputs_ = 0;
};

}  // namespace
