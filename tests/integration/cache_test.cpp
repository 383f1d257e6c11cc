// The on-disk cache across processes, as a service fleet would use it: warm
// starts, concurrent writers, killed writers, damaged entries, eviction while
// another process reads, and a directory that cannot be written. Every case
// runs the real `kiln` command in child processes on a fresh directory.
#include "cache_fixture.hpp"

namespace {

TEST_F(CacheTest, WarmStartInSecondProcessDoesNoCodegenAndGivesIdenticalOutputs) {
  const fs::path a = root_ / "a", b = root_ / "b";
  json first = run(1, a.string());
  EXPECT_EQ(outcome(first), "miss");
  EXPECT_GE(first["codegen_runs"].get<int64_t>(), 1);
  json second = run(1, b.string());
  EXPECT_EQ(outcome(second), "hit");
  EXPECT_EQ(second["codegen_runs"].get<int64_t>(), 0);
  EXPECT_EQ(second["specializations"][0]["cache_key"], first["specializations"][0]["cache_key"]);
  const std::string out_a = read_file(a / "probabilities.npy");
  EXPECT_FALSE(out_a.empty());
  EXPECT_EQ(out_a, read_file(b / "probabilities.npy"));
  // Another shape is another entry; the thread count is part of the key too.
  EXPECT_EQ(outcome(run(3)), "miss");
  EXPECT_EQ(entries().size(), 2u);
  Result other = kiln({"compile", kModel, "--shape", "image=1x1x8x8", "--threads", "2", "--json"});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_EQ(json::parse(other.out)["cache"], "miss");
  EXPECT_EQ(entries().size(), 3u);
}

// With the portable kernels, the kernel library (compiled once per process)
// is kept with the entry: the second process compiles nothing at all.
TEST_F(CacheTest, WarmStartWithPortableKernelsCompilesNothing) {
  auto run_portable = [&](const fs::path& out) {
    Result r = kiln({"run", kModel, "--json", "--threads", "1", "--kernels", "portable", "--input", "image=" + kDigit,
                     "--output-dir", out.string()});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  };
  const json first = run_portable(root_ / "a");
  ASSERT_FALSE(first.is_discarded());
  EXPECT_EQ(outcome(first), "miss");
  EXPECT_GE(first["codegen_runs"].get<int64_t>(), 2);  // the kernel library and the specialization
  const json second = run_portable(root_ / "b");
  ASSERT_FALSE(second.is_discarded());
  EXPECT_EQ(outcome(second), "hit");
  EXPECT_EQ(second["codegen_runs"].get<int64_t>(), 0);
  const std::string out_a = read_file(root_ / "a" / "probabilities.npy");
  EXPECT_FALSE(out_a.empty());
  EXPECT_EQ(out_a, read_file(root_ / "b" / "probabilities.npy"));
}

TEST_F(CacheTest, EightProcessesOnAnEmptyCacheAllSucceedWithOneEntry) {
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < 8; ++i)
    children.push_back(
        std::make_unique<Child>(std::vector<std::string>{"compile", kModel, "--dim", "batch=4", "--threads", "1", "--json"},
                                std::vector<std::string>{"KILN_CACHE_DIR=" + dir_.string()}, root_));
  for (auto& c : children) {
    Result r = c->wait();
    EXPECT_EQ(r.code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_TRUE(j["cache"] == "miss" || j["cache"] == "hit") << j.dump();
  }
  EXPECT_EQ(entries().size(), 1u);
  EXPECT_EQ(outcome(run(4)), "hit");
  Result verify = kiln({"cache", "verify", "--json"});
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_EQ(json::parse(verify.out)["entries"].size(), 0u) << verify.out;
}

TEST_F(CacheTest, WriterKilledMidWriteLeavesNothingAReaderAccepts) {
  const std::string expected = digit_output();
  Result cleared = kiln({"cache", "clear"});
  ASSERT_EQ(cleared.code, 0) << cleared.err;
  for (const std::string stall : {"object.o", "weights.bin", "manifest.json"}) {
    Child writer({"run", kModel, "--input", "image=" + kDigit, "--threads", "1"},
                 {"KILN_CACHE_DIR=" + dir_.string(), std::string("LD_PRELOAD=") + KILN_TEST_STALL_PRELOAD,
                  "KILN_TEST_STALL_AFTER=" + stall},
                 root_);
    // Wait until the writer has written that file into its private directory.
    bool reached = false;
    for (int i = 0; i < 600 && !reached; ++i) {
      std::error_code ec;
      for (const auto& d : fs::directory_iterator(dir_ / "tmp", ec))
        if (fs::exists(d.path() / stall)) reached = true;
      if (!reached) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    writer.kill();
    writer.wait();
    ASSERT_TRUE(reached) << "the writer never wrote " << stall;
    EXPECT_TRUE(entries().empty()) << "killed after " << stall;
    // A reader finds no entry, compiles, stores, and the next one hits.
    json j = run();
    EXPECT_EQ(outcome(j), "miss") << "killed after " << stall;
    EXPECT_EQ(digit_output(), expected);
    EXPECT_EQ(outcome(run()), "hit");
    ASSERT_EQ(kiln({"cache", "clear"}).code, 0);
  }
}

TEST_F(CacheTest, DamagedOrForeignEntriesAreRebuilt) {
  const std::string expected = digit_output();
  ASSERT_EQ(entries().size(), 1u);
  fs::path entry = entries()[0];
  auto flip = [](const fs::path& p, int64_t at) { flip_bits(p, at, 0x5a); };
  // Edited as someone holding the cache's secret would: the tag still
  // verifies, and what is wrong must be found in the manifest itself.
  auto edit_manifest = [&](const std::function<void(json&)>& change) {
    json m = json::parse(read_file(entry / "manifest.json"));
    change(m);
    write_tagged_manifest(entry, m.dump());
  };
  const std::vector<std::pair<std::string, std::function<void()>>> damages = {
      {"flipped weight byte", [&] { flip(entry / "weights.bin", int64_t(fs::file_size(entry / "weights.bin")) / 2); }},
      {"flipped object byte", [&] { flip(entry / "object.o", 100); }},
      {"truncated object", [&] { fs::resize_file(entry / "object.o", fs::file_size(entry / "object.o") / 2); }},
      {"truncated program", [&] { fs::resize_file(entry / "program.bin", 10); }},
      {"missing weights", [&] { fs::remove(entry / "weights.bin"); }},
      {"manifest of another build", [&] { edit_manifest([](json& m) { m["kiln_build"] = "build-id:0123456789"; }); }},
      {"manifest of another format", [&] { edit_manifest([](json& m) { m["format"] = 999; }); }},
      {"manifest not JSON", [&] { write_tagged_manifest(entry, "{ not json"); }},
      {"format as a string", [&] { edit_manifest([](json& m) { m["format"] = "2"; }); }},
      {"key null", [&] { edit_manifest([](json& m) { m["key"] = nullptr; }); }},
      {"size as a string", [&] { edit_manifest([](json& m) { m["files"]["object.o"]["bytes"] = "12"; }); }},
      {"key inputs a list", [&] { edit_manifest([](json& m) { m["key_inputs"] = json::array(); }); }},
      // Written as text: dumping 5000 levels recurses 5000 deep, which
      // overflows an AddressSanitizer build's stack (the reader must not).
      {"deeply nested",
       [&] {
         json m = json::parse(read_file(entry / "manifest.json"));
         m["backend"] = "NESTED";
         std::string text = m.dump();
         text.replace(text.find("\"NESTED\""), 8, std::string(5000, '[') + std::string(5000, ']'));
         write_tagged_manifest(entry, text);
       }},
      {"manifest edited without the secret", [&] { std::ofstream(entry / "manifest.json", std::ios::app) << " "; }},
  };
  // With two threads, the weights' checksum runs beside the rest of the load.
  for (int threads : {1, 2}) {
    if (threads != threads_) {  // the thread count is part of the key
      threads_ = threads;
      ASSERT_EQ(kiln({"cache", "clear"}).code, 0);
      EXPECT_EQ(outcome(run()), "miss");
      ASSERT_EQ(entries().size(), 1u);
      entry = entries()[0];
    }
    for (const auto& [what, damage] : damages) {
      SCOPED_TRACE(what + " with " + std::to_string(threads) + " thread(s)");
      damage();
      json j = run();
      EXPECT_EQ(outcome(j), "rebuild");
      EXPECT_FALSE(j["specializations"][0]["cache_note"].get<std::string>().empty());
      EXPECT_NE(last_err_.find("warning"), std::string::npos);
      EXPECT_EQ(digit_output(), expected);  // itself a hit on the rebuilt entry
      EXPECT_EQ(outcome(run()), "hit");
      ASSERT_EQ(entries().size(), 1u);
    }
  }
}

// A warm start reads neither the model file nor the entry's weights when it
// remembers their hashes; a change made in place afterwards, even one that
// puts the file's modification time back, must still be seen.
TEST_F(CacheTest, RememberedHashesNeverHideAChangeInPlace) {
  const fs::path model = root_ / "digits.onnx";
  fs::copy_file(kModel, model);
  auto run_model = [&](const fs::path& out) {
    Result r =
        kiln({"run", model.string(), "--json", "--threads", "1", "--input", "image=" + kDigit, "--output-dir", out.string()});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  };
  // A pause past the filesystem clock's tick after each write: nothing is
  // remembered of a file changed in the tick it was looked at.
  auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
  auto rewrite_in_place = [&](const fs::path& p, int64_t at) {
    const auto mtime = fs::last_write_time(p);
    flip_bits(p, at, 0x01);
    fs::last_write_time(p, mtime);
  };
  pause();
  EXPECT_EQ(outcome(run_model(root_ / "a")), "miss");
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  pause();
  EXPECT_EQ(outcome(run_model(root_ / "b")), "hit");
  ASSERT_TRUE(fs::exists(entry / "weights.bin.checked"));
  ASSERT_EQ(std::distance(fs::directory_iterator(dir_ / "hashes"), fs::directory_iterator()), 1);
  const std::string expected = read_file(root_ / "a" / "probabilities.npy");
  EXPECT_EQ(read_file(root_ / "b" / "probabilities.npy"), expected);

  rewrite_in_place(entry / "weights.bin", int64_t(fs::file_size(entry / "weights.bin")) / 2);
  const json rebuilt = run_model(root_ / "c");
  EXPECT_EQ(outcome(rebuilt), "rebuild");
  EXPECT_NE(rebuilt["specializations"][0]["cache_note"].get<std::string>().find("digest"), std::string::npos);
  EXPECT_EQ(read_file(root_ / "c" / "probabilities.npy"), expected);

  // A weight of the model itself (the first initializer's data follows the
  // graph's name): another model, so another key, not the remembered one.
  const std::string bytes = read_file(model);
  const size_t name = bytes.find("digits");
  ASSERT_NE(name, std::string::npos);
  pause();
  rewrite_in_place(model, int64_t(name) + 200);
  const json changed = run_model(root_ / "d");
  EXPECT_EQ(outcome(changed), "miss");
  EXPECT_NE(changed["specializations"][0]["cache_key"], rebuilt["specializations"][0]["cache_key"]);
  EXPECT_EQ(entries().size(), 2u);

  ASSERT_EQ(kiln({"cache", "clear"}).code, 0);
  EXPECT_FALSE(fs::exists(dir_ / "hashes") && !fs::is_empty(dir_ / "hashes"));
}

TEST_F(CacheTest, EvictionKeepsTheLimitAndNeverRemovesAnEntryInUse) {
  // Entry A, written by another process; this process then reads it (a hit
  // maps its files) for as long as `model` lives. A process that compiled an
  // entry itself does not read it, and holds nothing.
  run(1);
  kiln::RuntimeOptions options;
  options.cache_dir = dir_.string();
  options.threads = 1;
  ::unsetenv("KILN_CACHE");
  kiln::Runtime runtime(options);
  kiln::Model model = kiln::Model::load(runtime, kModel);
  kiln::Tensor image(kiln::DType::Float32, {1, 1, 8, 8});
  model.run({{"image", image}});
  ASSERT_EQ(model.specializations()[0].cache, kiln::CacheOutcome::Hit);
  ASSERT_EQ(entries().size(), 1u);
  const fs::path in_use = entries()[0];
  const int64_t limit = entry_bytes(in_use) * 5 / 2;  // room for about two entries

  for (int batch = 2; batch <= 7; ++batch) {
    run(batch, "", {"KILN_CACHE_MAX_BYTES=" + std::to_string(limit)});
    EXPECT_TRUE(fs::exists(in_use / "manifest.json")) << "the entry in use was removed at batch " << batch;
    int64_t others = 0;
    for (const auto& e : entries())
      if (e != in_use) others += entry_bytes(e);
    EXPECT_LE(others, limit) << "at batch " << batch;
  }
  EXPECT_LE(entries().size(), 3u);
  model.run({{"image", image}});  // the reader still works

  // Released, it may go like any other.
  model = kiln::Model();
  Result pruned = kiln({"cache", "prune", "--max-bytes", std::to_string(limit)});
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  int64_t total = 0;
  for (const auto& e : entries()) total += entry_bytes(e);
  EXPECT_LE(total, limit);
}

// The entry is made and written by the Runtime's writer thread; what it
// finds (here: the reference backend keeps no compiled code) is the
// specialization's outcome once the writes are waited for, in the API and in
// both commands, and nothing is stored.
TEST_F(CacheTest, WhatCannotBeStoredIsReportedOnceWritten) {
  kiln::RuntimeOptions options;
  options.cache_dir = dir_.string();
  options.backend = "reference";
  ::unsetenv("KILN_CACHE");
  {
    kiln::Runtime runtime(options);
    kiln::Model model = kiln::Model::load(runtime, kModel);
    model.run({{"image", kiln::Tensor(kiln::DType::Float32, {1, 1, 8, 8})}});
    runtime.wait_for_cache();
    const kiln::SpecializationStats s = model.specializations().at(0);
    EXPECT_EQ(s.cache, kiln::CacheOutcome::NotCached) << s.cache_note;
    EXPECT_NE(s.cache_note.find("reference"), std::string::npos) << s.cache_note;
  }
  EXPECT_TRUE(entries().empty());

  Result r = kiln({"run", kModel, "--input", "image=" + kDigit, "--backend", "reference", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json ran = json::parse(r.out);
  EXPECT_EQ(ran["specializations"][0]["cache"], "not cached") << r.out;
  Result c = kiln({"compile", kModel, "--shape", "image=2x1x8x8", "--backend", "reference", "--json"});
  EXPECT_EQ(c.code, 1) << c.err;  // compiling is for storing: nothing stored is a failure
  EXPECT_EQ(json::parse(c.out)["cache"], "not cached") << c.out;
  EXPECT_TRUE(entries().empty());
}

TEST_F(CacheTest, UnwritableDirectoryStillRunsWithOneWarning) {
  const std::string expected = [&] {
    const fs::path out = root_ / "plain";
    Result r = kiln({"run", kModel, "--input", "image=" + kDigit, "--no-cache", "--output-dir", out.string()});
    EXPECT_EQ(r.code, 0) << r.err;
    return read_file(out / "probabilities.npy");
  }();
  // A path under a regular file can never be a directory, for any user (root included).
  std::ofstream(root_ / "file") << "x";
  std::vector<fs::path> unwritable{root_ / "file" / "cache"};
  if (::geteuid() != 0) {  // permissions bind everyone but root
    fs::create_directories(root_ / "readonly");
    fs::permissions(root_ / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
    unwritable.push_back(root_ / "readonly");
  }
  for (const auto& dir : unwritable) {
    dir_ = dir;
    const fs::path out = root_ / "out";
    fs::remove_all(out);
    Result r = kiln({"run", kModel, "--input", "image=" + kDigit, "--output-dir", out.string(), "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["specializations"][0]["cache"], "off") << dir;
    size_t warnings = 0;
    for (size_t at = r.err.find("warning"); at != std::string::npos; at = r.err.find("warning", at + 1)) ++warnings;
    EXPECT_EQ(warnings, 1u) << r.err;
    EXPECT_EQ(read_file(out / "probabilities.npy"), expected) << dir;
  }
}

// examples/service-cpp: a C++ service linking libkiln, restarted once; the
// second process loads every specialization it warms and answers the same.
TEST_F(CacheTest, ServiceExampleStartsWarmAfterARestart) {
  auto service = [&] {
    const std::string command = std::string(KILN_SERVICE_PATH) + " " + kModel + " --cache-dir " + dir_.string() + " 2>&1";
    std::string out;
    FILE* p = ::popen(command.c_str(), "r");
    char buf[1024];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_EQ(p ? ::pclose(p) : -1, 0) << out;
    return out;
  };
  const std::string first = service(), second = service();
  for (const char* batch : {"batch 1", "batch 4", "batch 8"}) {
    EXPECT_NE(first.find(std::string(batch) + ": compiled (cache: miss)"), std::string::npos) << first;
    EXPECT_NE(second.find(std::string(batch) + ": loaded (cache: hit)"), std::string::npos) << second;
  }
  const auto checksum = [](const std::string& out) { return out.substr(out.find("checksum")); };
  ASSERT_NE(first.find("checksum"), std::string::npos) << first;
  EXPECT_EQ(checksum(first), checksum(second));
}

TEST_F(CacheTest, CommandsListVerifyPruneAndClear) {
  run(1);
  run(2);
  Result ls = kiln({"cache", "ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  json list = json::parse(ls.out);
  ASSERT_EQ(list.size(), 2u);
  for (const auto& e : list) {
    EXPECT_EQ(e["model"], kModel);
    EXPECT_GT(e["bytes"].get<int64_t>(), 0);
    EXPECT_EQ(e["problem"], "");
    EXPECT_EQ(e["backend"].get<std::string>().rfind("cpu ", 0), 0u) << e["backend"];
  }
  // A damaged entry is reported and removed by verify, and only that one.
  std::ofstream(entries()[0] / "program.bin", std::ios::app) << "junk";
  Result verify = kiln({"cache", "verify", "--json"});
  ASSERT_EQ(verify.code, 0) << verify.err;
  EXPECT_EQ(json::parse(verify.out)["entries"].size(), 1u);
  EXPECT_EQ(entries().size(), 1u);
  EXPECT_EQ(kiln({"cache", "prune", "--max-bytes", "0"}).code, 0);
  EXPECT_TRUE(entries().empty());
  run(1);
  EXPECT_EQ(kiln({"cache", "clear"}).code, 0);
  EXPECT_TRUE(entries().empty());
  Result bad = kiln({"cache", "prune"});
  EXPECT_NE(bad.code, 0);  // --max-bytes is required
}

}  // namespace
