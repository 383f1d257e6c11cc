// The cache as a trust boundary: entries are code that Kiln maps and runs,
// so it loads them only from a directory nobody else can write, or with a
// key; hash records cannot redirect a model; the cache commands never follow
// a link or touch a directory that is not a Kiln cache; models loaded from
// memory stay out of the cache unless asked. Each case is an attack (or a
// mistake) from the hardening issue, run through the real `kiln` command.
#include <sys/file.h>

#include "cache_fixture.hpp"

namespace {

constexpr uid_t kNobody = 65534;

class CacheTrustTest : public CacheTest {
 protected:
  // Ownership can be given away only by root.
  static bool can_chown() { return ::geteuid() == 0; }

  static mode_t mode_of(const fs::path& p) {
    struct stat st{};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  static void chown_all(const fs::path& p, uid_t uid) {
    ASSERT_EQ(::lchown(p.c_str(), uid, uid), 0) << p;
    if (fs::is_directory(fs::symlink_status(p)))
      for (const auto& f : fs::recursive_directory_iterator(p)) ASSERT_EQ(::lchown(f.path().c_str(), uid, uid), 0) << f.path();
  }

  // A key file as `head -c 32 /dev/urandom > FILE` makes it.
  fs::path key_file(const std::string& name, char fill) const {
    const fs::path p = root_ / name;
    std::ofstream(p) << std::string(32, fill);
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
    return p;
  }

  static size_t count(const std::string& text, const std::string& word) {
    size_t n = 0;
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
    return n;
  }

  std::string expected_digit_output() {
    const fs::path out = root_ / ("plain_" + std::to_string(outputs_++));
    Result r = kiln({"run", kModel, "--input", "image=" + kDigit, "--no-cache", "--output-dir", out.string()});
    EXPECT_EQ(r.code, 0) << r.err;
    return read_file(out / "probabilities.npy");
  }
};

TEST_F(CacheTrustTest, DirectoriesAndFilesArePrivateWhateverTheUmask) {
  const mode_t saved = ::umask(0);  // the child inherits it
  run();
  ::umask(saved);
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_EQ(mode_of(dir_), 0700u);
  for (const char* part : {"entries", "tmp", "hashes"}) EXPECT_EQ(mode_of(dir_ / part), 0700u) << part;
  EXPECT_EQ(mode_of(entries()[0]), 0700u);
  for (const auto& f : fs::directory_iterator(entries()[0])) EXPECT_EQ(mode_of(f.path()), 0600u) << f.path();
  for (const auto& f : fs::directory_iterator(dir_ / "hashes")) EXPECT_EQ(mode_of(f.path()), 0600u) << f.path();
  EXPECT_EQ(mode_of(dir_ / "secret"), 0600u);
  EXPECT_EQ(read_file(dir_ / "CACHEDIR.TAG").rfind("Signature: 8a477f597d28d172789f06886806bc55\n", 0), 0u);
}

// Without a key, a directory others can write is not loaded from at all: a
// miss with one warning saying why, and the right outputs.
TEST_F(CacheTrustTest, ADirectoryOthersCanWriteIsNotUsedWithoutAKey) {
  const std::string expected = expected_digit_output();
  run();
  ASSERT_EQ(outcome(run()), "hit");
  for (const auto& [mode, why] : std::vector<std::pair<fs::perms, std::string>>{
           {fs::perms::all, "writable by everyone"}, {fs::perms::owner_all | fs::perms::group_all, "writable by its group"}}) {
    fs::permissions(dir_, mode);
    const json j = run(1, (root_ / ("out_" + why)).string());
    EXPECT_EQ(outcome(j), "off") << why;
    EXPECT_EQ(count(last_err_, "warning"), 1u) << last_err_;
    EXPECT_NE(last_err_.find(why), std::string::npos) << last_err_;
    EXPECT_EQ(read_file(root_ / ("out_" + why) / "probabilities.npy"), expected);
    Result ls = kiln({"cache", "ls"});
    EXPECT_EQ(ls.code, 1) << ls.out;
    EXPECT_NE(ls.err.find(why), std::string::npos) << ls.err;
  }
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(outcome(run()), "hit");
}

// The attack of the issue: another user plants an entry (other weights, and
// the files' digests and tag made with a secret of their own) where the
// cache can be written by others. Without a key Kiln refuses the directory;
// with a key the planted entry's tag does not verify. Never its outputs.
TEST_F(CacheTrustTest, APlantedEntryIsNeverRun) {
  if (!can_chown()) GTEST_SKIP() << "planting as another user needs root";
  const std::string expected = expected_digit_output();
  auto plant = [&] {
    ASSERT_EQ(entries().size(), 1u);
    const fs::path entry = entries()[0];
    const std::string theirs(32, 'p');
    std::ofstream(dir_ / "secret", std::ios::trunc) << theirs;  // the directory lets them replace it
    flip_bits(entry / "weights.bin", int64_t(fs::file_size(entry / "weights.bin")) / 2, 0x40);
    json m = json::parse(read_file(entry / "manifest.json"));
    const std::string weights = read_file(entry / "weights.bin");
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(weights.data(), weights.size(), digest, &n, EVP_sha256(), nullptr);
    std::string hex;
    for (unsigned i = 0; i < n; ++i) hex += {"0123456789abcdef"[digest[i] >> 4], "0123456789abcdef"[digest[i] & 15]};
    m["files"]["weights.bin"]["sha256"] = hex;
    fs::remove(entry / "weights.bin.checked");
    write_tagged_manifest(entry, m.dump(), theirs);
    // Theirs, in directories a permissive umask left open.
    chown_all(dir_ / "entries", kNobody);
    chown_all(dir_ / "secret", kNobody);
    fs::permissions(dir_, fs::perms::all);
    fs::permissions(dir_ / "entries", fs::perms::all);
  };

  // No key: the whole directory is refused.
  run();
  plant();
  json j = run(1, (root_ / "no_key").string());
  EXPECT_EQ(outcome(j), "off");
  EXPECT_EQ(read_file(root_ / "no_key" / "probabilities.npy"), expected);

  // With a key, a shared directory is used, but only for entries tagged with it.
  fs::remove_all(dir_);
  const std::string key = "KILN_CACHE_KEY_FILE=" + key_file("team.key", 'k').string();
  EXPECT_EQ(outcome(run(1, "", {key})), "miss");
  EXPECT_EQ(outcome(run(1, "", {key})), "hit");
  plant();
  j = run(1, (root_ / "keyed").string(), {key});
  EXPECT_EQ(outcome(j), "rebuild");
  EXPECT_NE(j["specializations"][0]["cache_note"].get<std::string>().find("tag does not verify"), std::string::npos) << j.dump();
  EXPECT_EQ(read_file(root_ / "keyed" / "probabilities.npy"), expected);
}

TEST_F(CacheTrustTest, AKeyedCacheMayBeSharedAndLoadsOnlyItsOwnEntries) {
  const std::string expected = expected_digit_output();
  const std::string key = "KILN_CACHE_KEY_FILE=" + key_file("team.key", 'k').string();
  const std::string other = "KILN_CACHE_KEY_FILE=" + key_file("other.key", 'o').string();
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_all | fs::perms::set_gid);
  EXPECT_EQ(outcome(run(1, "", {key})), "miss");
  ASSERT_EQ(entries().size(), 1u);
  // The group shares what the directory shares; others get nothing.
  EXPECT_EQ(mode_of(entries()[0]) & 0777, 0770u);
  EXPECT_EQ(mode_of(entries()[0] / "object.o"), 0640u);
  EXPECT_FALSE(fs::exists(dir_ / "secret"));
  const json hit = run(1, (root_ / "hit").string(), {key});
  EXPECT_EQ(outcome(hit), "hit");
  EXPECT_EQ(read_file(root_ / "hit" / "probabilities.npy"), expected);
  // An entry another member of the group wrote: read into memory (its owner
  // could change it under a mapping), checked, and used.
  if (can_chown()) {
    chown_all(entries()[0], kNobody);
    const json theirs = run(1, (root_ / "theirs").string(), {key});
    EXPECT_EQ(outcome(theirs), "hit");
    EXPECT_EQ(read_file(root_ / "theirs" / "probabilities.npy"), expected);
  }
  // Another key sees an entry it cannot authenticate, and rebuilds it.
  EXPECT_EQ(outcome(run(1, "", {other})), "rebuild");
  EXPECT_EQ(outcome(run(1, "", {key})), "rebuild");
  // Without a key the shared directory is not private: not used.
  EXPECT_EQ(outcome(run()), "off");

  // A key file anyone could read or change is refused, and so the cache.
  const fs::path loose = key_file("loose.key", 'l');
  fs::permissions(loose, fs::perms::others_read, fs::perm_options::add);
  const json j = run(1, "", {"KILN_CACHE_KEY_FILE=" + loose.string()});
  EXPECT_EQ(outcome(j), "off");
  EXPECT_NE(last_err_.find("readable by everyone"), std::string::npos) << last_err_;
  std::ofstream(root_ / "short.key") << "tiny";
  fs::permissions(root_ / "short.key", fs::perms::owner_read);
  EXPECT_EQ(outcome(run(1, "", {"KILN_CACHE_KEY_FILE=" + (root_ / "short.key").string()})), "off");
  EXPECT_NE(last_err_.find("has 4 bytes"), std::string::npos) << last_err_;
}

// Editing a remembered model hash so that it names another model's hash
// made a model run the other model's entry. A record is tagged: an edited
// one is not believed (the model is hashed again), and verify removes it.
TEST_F(CacheTrustTest, AnEditedHashRecordCannotRedirectAModel) {
  const fs::path a = root_ / "a.onnx", b = root_ / "b.onnx";
  fs::copy_file(kModel, a);
  std::string bytes = read_file(kModel);
  const size_t weight = bytes.find("digits");
  ASSERT_NE(weight, std::string::npos);
  for (size_t at = weight + 200; at < weight + 1224; ++at) bytes[at] ^= 0x40;  // weights of the first initializer: another model
  std::ofstream(b, std::ios::binary) << bytes;
  auto run_model = [&](const fs::path& model, const std::string& out) {
    Result r = kiln({"run", model.string(), "--json", "--threads", "1", "--input", "image=" + kDigit, "--output-dir", out});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the file clock's tick (hash_memo.hpp)
  const json ja = run_model(a, (root_ / "a_out").string()), jb = run_model(b, (root_ / "b_out").string());
  ASSERT_NE(ja["specializations"][0]["cache_key"], jb["specializations"][0]["cache_key"]);
  ASSERT_NE(read_file(root_ / "a_out" / "probabilities.npy"), read_file(root_ / "b_out" / "probabilities.npy"));
  struct stat st{};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  const fs::path record_a = dir_ / "hashes" / (std::to_string(st.st_dev) + "." + std::to_string(st.st_ino));
  ASSERT_EQ(::stat(b.c_str(), &st), 0);
  const fs::path record_b = dir_ / "hashes" / (std::to_string(st.st_dev) + "." + std::to_string(st.st_ino));
  json ra = json::parse(read_file(record_a)), rb = json::parse(read_file(record_b));
  ra["hash"] = rb["hash"];  // a's identity, b's content
  std::ofstream(record_a, std::ios::trunc) << ra.dump();

  const json again = run_model(a, (root_ / "a_again").string());
  EXPECT_EQ(again["specializations"][0]["cache_key"], ja["specializations"][0]["cache_key"]);
  EXPECT_EQ(read_file(root_ / "a_again" / "probabilities.npy"), read_file(root_ / "a_out" / "probabilities.npy"));
  // The record was rewritten with the true hash when the model was hashed again.
  EXPECT_NE(json::parse(read_file(record_a))["hash"], rb["hash"]);

  std::ofstream(record_a, std::ios::trunc) << ra.dump();
  Result verify = kiln({"cache", "verify", "--json"});
  ASSERT_EQ(verify.code, 0) << verify.err;
  const json report = json::parse(verify.out);
  ASSERT_EQ(report["hashes"].size(), 1u) << verify.out;
  EXPECT_NE(report["hashes"][0].get<std::string>().find("tag does not verify"), std::string::npos);
  EXPECT_FALSE(fs::exists(record_a));
  EXPECT_TRUE(fs::exists(record_b));
}

// Symbolic links anywhere in the cache, and directories that are not Kiln
// caches: the commands refuse, or remove the link alone; nothing outside is
// touched.
TEST_F(CacheTrustTest, CommandsNeverFollowALinkOrTouchAnotherDirectory) {
  const fs::path outside = root_ / "outside";
  auto fill_outside = [&] {
    fs::remove_all(outside);
    fs::create_directories(outside / "sub");
    std::ofstream(outside / "precious") << "keep me";
    std::ofstream(outside / "sub" / "precious") << "keep me";
    const auto old = fs::file_time_type::clock::now() - std::chrono::hours(3);
    for (const auto& p : {outside / "precious", outside / "sub", outside / "sub" / "precious"}) fs::last_write_time(p, old);
  };
  auto outside_intact = [&] {
    return read_file(outside / "precious") == "keep me" && read_file(outside / "sub" / "precious") == "keep me";
  };
  const std::vector<std::vector<std::string>> commands = {
      {"cache", "ls"}, {"cache", "verify"}, {"cache", "prune", "--max-bytes", "0"}, {"cache", "clear"}};

  for (const char* part : {"entries", "tmp", "hashes"}) {
    SCOPED_TRACE(part);
    fs::remove_all(dir_);
    run();
    fill_outside();
    fs::remove_all(dir_ / part);
    fs::create_directory_symlink(outside, dir_ / part);
    for (const auto& command : commands) {
      Result r = kiln(command);
      EXPECT_EQ(r.code, 1) << command[1] << ": " << r.out;
      EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
      EXPECT_TRUE(outside_intact()) << command[1];
    }
    EXPECT_EQ(outcome(run()), "off");
    EXPECT_TRUE(outside_intact());
  }

  // An entry that is a link, and an entry whose file is a link: bad entries,
  // removed as links.
  fs::remove_all(dir_);
  run();
  run(2);
  fill_outside();
  ASSERT_EQ(entries().size(), 2u);
  const fs::path linked_entry = entries()[0], linked_file = entries()[1] / "weights.bin";
  fs::remove_all(linked_entry);
  fs::create_directory_symlink(outside, linked_entry);
  fs::remove(linked_file);
  fs::create_symlink(outside / "precious", linked_file);
  Result verify = kiln({"cache", "verify", "--json"});
  ASSERT_EQ(verify.code, 0) << verify.err;
  EXPECT_EQ(json::parse(verify.out)["entries"].size(), 2u) << verify.out;
  EXPECT_TRUE(entries().empty());
  EXPECT_TRUE(outside_intact());

  // An ordinary directory that happens to have tmp/ and entries/.
  fill_outside();
  fs::create_directories(outside / "tmp" / "old");
  fs::create_directories(outside / "entries" / "x");
  std::ofstream(outside / "tmp" / "old" / "precious") << "keep me";
  fs::last_write_time(outside / "tmp" / "old", fs::file_time_type::clock::now() - std::chrono::hours(3));
  for (const auto& command : commands) {
    std::vector<std::string> args = command;
    args.insert(args.begin() + 1, {"--cache-dir", outside.string()});
    Result r = kiln(args);
    EXPECT_EQ(r.code, 1) << command[1] << ": " << r.out;
    EXPECT_NE(r.err.find("is not a Kiln cache"), std::string::npos) << r.err;
  }
  Result ran = kiln({"run", kModel, "--input", "image=" + kDigit, "--cache-dir", outside.string(), "--json"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  EXPECT_EQ(json::parse(ran.out)["specializations"][0]["cache"], "off");
  EXPECT_TRUE(outside_intact());
  EXPECT_EQ(read_file(outside / "tmp" / "old" / "precious"), "keep me");
  EXPECT_TRUE(fs::exists(outside / "entries" / "x"));
  EXPECT_FALSE(fs::exists(outside / "CACHEDIR.TAG"));
}

TEST_F(CacheTrustTest, VerifySaysWhatItCouldNotRemove) {
  run();
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  std::ofstream(entry / "program.bin", std::ios::app) << "junk";
  // A running process holds the entry (as a loaded model does).
  const int lock = ::open((entry / "lock").c_str(), O_RDONLY);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_SH), 0);
  Result held = kiln({"cache", "verify"});
  EXPECT_EQ(held.code, 1) << held.out;
  EXPECT_NE(held.out.find("NOT removed"), std::string::npos) << held.out;
  EXPECT_NE(held.out.find("in use"), std::string::npos) << held.out;
  Result json_held = kiln({"cache", "verify", "--json"});
  EXPECT_EQ(json_held.code, 1);
  EXPECT_EQ(json::parse(json_held.out)["entries"][0]["removed"], false) << json_held.out;
  EXPECT_EQ(entries().size(), 1u);
  ::close(lock);
  Result released = kiln({"cache", "verify"});
  EXPECT_EQ(released.code, 0) << released.out;
  EXPECT_TRUE(entries().empty());
}

TEST_F(CacheTrustTest, CompilingIntoAnUnusableCacheFails) {
  std::ofstream(root_ / "file") << "x";
  dir_ = root_ / "file" / "cache";
  Result r = kiln({"compile", kModel, "--dim", "batch=2"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.find("cache: /"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("nothing was stored"), std::string::npos) << r.err;
}

// An application that decrypts its model keeps it in memory: its weights
// must not reach the disk in the clear unless it says so.
TEST_F(CacheTrustTest, ModelsFromMemoryStayOutOfTheCacheUnlessAsked) {
  const std::string bytes = read_file(kModel);
  kiln::RuntimeOptions options;
  options.cache_dir = dir_.string();
  options.threads = 1;
  ::unsetenv("KILN_CACHE");
  const kiln::Tensor image(kiln::DType::Float32, {1, 1, 8, 8});
  {
    kiln::Runtime runtime(options);
    kiln::Model model = kiln::Model::load_from_memory(runtime, bytes.data(), bytes.size());
    model.run({{"image", image}});
    runtime.wait_for_cache();
    EXPECT_EQ(model.specializations().at(0).cache, kiln::CacheOutcome::NotCached);
    EXPECT_NE(model.specializations().at(0).cache_note.find("loaded from memory"), std::string::npos);
  }
  EXPECT_TRUE(entries().empty());
  EXPECT_FALSE(fs::exists(dir_ / "hashes") && !fs::is_empty(dir_ / "hashes"));
  for (const auto expected : {kiln::CacheOutcome::Miss, kiln::CacheOutcome::Hit}) {
    kiln::Runtime runtime(options);
    kiln::Model model = kiln::Model::load_from_memory(runtime, bytes.data(), bytes.size(),
                                                      kiln::Model::MemoryLoadOptions{.external_data_dir = "", .cache = true});
    model.run({{"image", image}});
    runtime.wait_for_cache();
    EXPECT_EQ(model.specializations().at(0).cache, expected);
  }
  EXPECT_EQ(entries().size(), 1u);
}

}  // namespace
