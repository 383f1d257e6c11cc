#pragma once
// A file's hash remembered by the file's identity, so that a warm start need
// not read a large file again to learn what it already knew: the model's
// files (their hashes are part of every cache key) and an entry's weights
// (checked against the manifest). Reading them cost resnet50's warm start
// 19 ms of 81 on a slow day.
//
// A record holds the file's device, inode, size, mtime and ctime as they were
// before the file was hashed. It is trusted only while all of them still
// match. The kernel sets ctime on every change of content and no call can set
// it back, so a change made after the record was written changes ctime,
// unless it falls in the same tick of the filesystem's clock (4 ms here) as
// the change before it. Hence the rule when remembering: only if the file
// last changed strictly before `looked_at`, a coarse clock reading taken
// before the file was examined; any later change then gets a ctime at or
// after `looked_at`, which the record cannot hold (git's "racily clean"
// entries, for the same reason).
//
// A record decides which cache entry a model gets, so it carries a tag made
// with the cache's secret (authenticator.hpp): one that was edited, or
// written with another secret, is not believed.
#include <sys/stat.h>

#include <ctime>
#include <string>

#include "cache/authenticator.hpp"
#include "runtime/ir/file_hash.hpp"

namespace kiln::cache {

using ir::coarse_now;  // read before examining a file

// The hash recorded in record `name` of directory `dir` for exactly this
// identity, or "".
std::string recall_hash(int dir, const std::string& name, const struct stat& st, const Authenticator& auth);

// Records `hash` for the file with identity `st` (its fstat after
// `looked_at`; `hash` describes its content as of then), as a file of
// `mode`. Nothing happens if the file changed too recently to tell a later
// change apart, or if the record cannot be written (a read-only cache): a
// memo, never an error. `about` is written for people reading the record.
void remember_hash(int dir, const std::string& name, const struct stat& st, const timespec& looked_at, const std::string& hash,
                   const std::string& about, const Authenticator& auth, mode_t mode);

// What is wrong with record `name` ("" if it is whole and its tag verifies).
std::string check_record(int dir, const std::string& name, const Authenticator& auth);

}  // namespace kiln::cache
