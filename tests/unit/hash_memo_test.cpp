// Remembered file hashes (src/cache/hash_memo.hpp): a record answers only for
// the identity it was written for, and is not written when a later change
// could go unseen.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct stat identity() const {
    struct stat st {};
    EXPECT_EQ(::stat(file_.c_str(), &st), 0);
    return st;
  }
  static timespec after(const struct stat& st) { return {st.st_ctim.tv_sec + 1, st.st_ctim.tv_nsec}; }

  fs::path dir_;
  std::string file_, record_;
};

TEST_F(HashMemoTest, AnswersForTheSameIdentityOnly) {
  const struct stat st = identity();
  EXPECT_EQ(recall_hash(record_, st), "");
  remember_hash(record_, st, after(st), "0123", file_);
  EXPECT_EQ(recall_hash(record_, st), "0123");
  struct stat other = st;
  other.st_size += 1;
  EXPECT_EQ(recall_hash(record_, other), "");
  other = st;
  other.st_ino += 1;
  EXPECT_EQ(recall_hash(record_, other), "");
  other = st;
  other.st_dev += 1;
  EXPECT_EQ(recall_hash(record_, other), "");
  struct stat touched = st;
  touched.st_ctim.tv_nsec = (touched.st_ctim.tv_nsec + 1) % 1000000000;
  EXPECT_EQ(recall_hash(record_, touched), "");
  touched = st;
  touched.st_mtim.tv_sec -= 1;
  EXPECT_EQ(recall_hash(record_, touched), "");
}

TEST_F(HashMemoTest, RewritingTheFileInPlaceWithItsOldTimesIsSeen) {
  const struct stat st = identity();
  remember_hash(record_, st, after(st), "0123", file_);
  ASSERT_EQ(recall_hash(record_, st), "0123");
  ::usleep(20000);  // past the filesystem clock's tick
  { std::fstream(file_, std::ios::in | std::ios::out | std::ios::binary) << "W"; }
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file_.c_str(), times, 0), 0);  // mtime put back; ctime cannot be
  const struct stat now = identity();
  EXPECT_EQ(now.st_size, st.st_size);
  EXPECT_EQ(now.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
  EXPECT_EQ(recall_hash(record_, now), "");
}

TEST_F(HashMemoTest, NothingIsRememberedOfAFileChangedSinceLookingAt) {
  const struct stat st = identity();
  remember_hash(record_, st, st.st_ctim, "0123", file_);  // changed in the very tick it was looked at
  EXPECT_FALSE(fs::exists(record_));
  timespec before = st.st_mtim;
  before.tv_sec -= 1;
  remember_hash(record_, st, before, "0123", file_);
  EXPECT_FALSE(fs::exists(record_));
  remember_hash(record_, st, after(st), "0123", file_);
  EXPECT_TRUE(fs::exists(record_));
}

TEST_F(HashMemoTest, DamagedOrUnwritableRecordsAreMisses) {
  const struct stat st = identity();
  std::ofstream(record_) << "{ not json";
  EXPECT_EQ(recall_hash(record_, st), "");
  std::ofstream(record_) << "[1, 2]";
  EXPECT_EQ(recall_hash(record_, st), "");
  fs::remove(record_);
  remember_hash((dir_ / "no" / "such" / "dir").string(), st, after(st), "0123", file_);  // no error
  EXPECT_FALSE(fs::exists(dir_ / "no"));
  EXPECT_NEAR(double(coarse_now().tv_sec), double(::time(nullptr)), 1.0);  // the clock file times come from
}

}  // namespace
