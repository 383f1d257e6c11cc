// Remembered file hashes (src/cache/hash_memo.hpp): a record answers only for
// the identity it was written for and only with its tag intact, and is not
// written when a later change could go unseen.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cache/cache_dir.hpp"
#include "cache/hash_memo.hpp"

namespace fs = std::filesystem;
using namespace kiln::cache;

namespace {

class HashMemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_hash_memo_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = (dir_ / "model.onnx").string();
    record_ = (dir_ / "record").string();
    std::ofstream(file_) << "weights";
    fd_ = open_dir_at(AT_FDCWD, dir_.string());
    ASSERT_TRUE(fd_);
  }
  std::string recall(const struct stat& st) const { return recall_hash(fd_.get(), "record", st, auth_); }
  void remember(const struct stat& st, const timespec& looked_at, const std::string& hash) const {
    remember_hash(fd_.get(), "record", st, looked_at, hash, file_, auth_, 0600);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct stat identity() const {
    struct stat st{};
    EXPECT_EQ(::stat(file_.c_str(), &st), 0);
    return st;
  }
  static timespec after(const struct stat& st) { return {st.st_ctim.tv_sec + 1, st.st_ctim.tv_nsec}; }

  fs::path dir_;
  std::string file_, record_;
  Fd fd_;
  Authenticator auth_{std::string(32, 's')};
};

TEST_F(HashMemoTest, AnswersForTheSameIdentityOnly) {
  const struct stat st = identity();
  EXPECT_EQ(recall(st), "");
  remember(st, after(st), "0123");
  EXPECT_EQ(recall(st), "0123");
  struct stat other = st;
  other.st_size += 1;
  EXPECT_EQ(recall(other), "");
  other = st;
  other.st_ino += 1;
  EXPECT_EQ(recall(other), "");
  other = st;
  other.st_dev += 1;
  EXPECT_EQ(recall(other), "");
  struct stat touched = st;
  touched.st_ctim.tv_nsec = (touched.st_ctim.tv_nsec + 1) % 1000000000;
  EXPECT_EQ(recall(touched), "");
  touched = st;
  touched.st_mtim.tv_sec -= 1;
  EXPECT_EQ(recall(touched), "");
}

TEST_F(HashMemoTest, RewritingTheFileInPlaceWithItsOldTimesIsSeen) {
  const struct stat st = identity();
  remember(st, after(st), "0123");
  ASSERT_EQ(recall(st), "0123");
  ::usleep(20000);  // past the filesystem clock's tick
  {
    std::fstream(file_, std::ios::in | std::ios::out | std::ios::binary) << "W";
  }
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file_.c_str(), times, 0), 0);  // mtime put back; ctime cannot be
  const struct stat now = identity();
  EXPECT_EQ(now.st_size, st.st_size);
  EXPECT_EQ(now.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
  EXPECT_EQ(recall(now), "");
}

TEST_F(HashMemoTest, NothingIsRememberedOfAFileChangedSinceLookingAt) {
  const struct stat st = identity();
  remember(st, st.st_ctim, "0123");  // changed in the very tick it was looked at
  EXPECT_FALSE(fs::exists(record_));
  timespec before = st.st_mtim;
  before.tv_sec -= 1;
  remember(st, before, "0123");
  EXPECT_FALSE(fs::exists(record_));
  remember(st, after(st), "0123");
  EXPECT_TRUE(fs::exists(record_));
}

TEST_F(HashMemoTest, DamagedOrUnwritableRecordsAreMisses) {
  const struct stat st = identity();
  std::ofstream(record_) << "{ not json";
  EXPECT_EQ(recall(st), "");
  std::ofstream(record_) << "[1, 2]";
  EXPECT_EQ(recall(st), "");
  fs::remove(record_);
  remember_hash(fd_.get(), "no/such/dir", st, after(st), "0123", file_, auth_, 0600);  // no error
  EXPECT_FALSE(fs::exists(dir_ / "no"));
  fs::create_directory(dir_ / "elsewhere");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "record");  // never followed
  EXPECT_EQ(recall(st), "");
  remember(st, after(st), "0123");  // replaces the link
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere"));
  EXPECT_FALSE(fs::is_symlink(record_));
  EXPECT_EQ(recall(st), "0123");
  EXPECT_NEAR(double(coarse_now().tv_sec), double(::time(nullptr)), 1.0);  // the clock file times come from
}

TEST_F(HashMemoTest, AnEditedRecordOrAnotherSecretIsNotBelieved) {
  const struct stat st = identity();
  remember(st, after(st), "0123");
  ASSERT_EQ(recall(st), "0123");
  EXPECT_EQ(check_record(fd_.get(), "record", auth_), "");
  EXPECT_EQ(recall_hash(fd_.get(), "record", st, Authenticator(std::string(32, 'o'))), "");
  std::string text;
  {
    std::ifstream in(record_);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("0123");
  ASSERT_NE(at, std::string::npos);
  text[at] = '9';  // another model's hash
  std::ofstream(record_, std::ios::trunc) << text;
  EXPECT_EQ(recall(st), "");
  EXPECT_NE(check_record(fd_.get(), "record", auth_).find("tag"), std::string::npos);
}

}  // namespace
