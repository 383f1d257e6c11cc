// The framing of a cached program: a CBOR document and the blocks of bytes
// it names. Every way the bytes can be wrong is an InvalidModel error.
#include <gtest/gtest.h>

#include <string>

#include "backends/program_blocks.hpp"
#include "runtime/ir/error.hpp"

namespace {

using kiln::backends::BlockReader;
using kiln::backends::BlockWriter;
using nlohmann::json;

void expect_invalid(std::string_view bytes, const std::string& says) {
  try {
    BlockReader reader(bytes, "the program");
    FAIL() << "read";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(ProgramBlocks, BlocksComeBackAsTheyWereAdded) {
  BlockWriter blocks;
  const std::string first = "abc", second(1000, '\x7f'), empty;
  json doc = {{"first", blocks.add(first.data(), first.size())},
              {"second", blocks.add(second.data(), second.size())},
              {"empty", blocks.add(empty.data(), 0)}};
  const std::string bytes = blocks.finish(doc);
  const BlockReader reader(bytes, "the program");
  EXPECT_EQ(reader.document(), doc);
  EXPECT_EQ(reader.block(doc["first"], "first"), first);
  EXPECT_EQ(reader.block(doc["second"], "second", 1000), second);
  EXPECT_EQ(reader.block(doc["empty"], "empty"), "");
  // Each block starts at a multiple of 8 from the file's start.
  EXPECT_EQ((reader.block(doc["second"], "second").data() - bytes.data()) % 8, 0);
}

TEST(ProgramBlocks, BadReferencesAreErrorsThatSayWhere) {
  BlockWriter blocks;
  const std::string data(16, 'x');
  const json ref = blocks.add(data.data(), data.size());
  const std::string bytes = blocks.finish({{"r", ref}});
  const BlockReader reader(bytes, "the program");
  auto expect_bad = [&](const json& r, int64_t size, const std::string& says) {
    try {
      reader.block(r, "step 'x'", size);
      FAIL() << "read " << r.dump();
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
      EXPECT_EQ(std::string(e.what()).rfind("step 'x': ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_bad(json::array({0, 17}), -1, "17 bytes at 0 lie outside the program's 16 bytes of blocks");
  expect_bad(json::array({8, 9}), -1, "lie outside");
  expect_bad(json::array({uint64_t(1) << 63, 1}), -1, "lie outside");
  expect_bad(json::array({0, 16}), 12, "a block of 16 bytes where 12 were expected");
  expect_bad("abc", -1, "not a reference");
  expect_bad(json::array({-1, 4}), -1, "not a reference");
  expect_bad(json::array({0}), -1, "not a reference");
}

TEST(ProgramBlocks, CutOrCorruptFramingIsAnError) {
  BlockWriter blocks;
  const std::string data(64, 'y');
  const std::string bytes = blocks.finish({{"r", blocks.add(data.data(), data.size())}, {"n", 7}});
  expect_invalid("", "too short");
  expect_invalid(bytes.substr(0, 7), "too short");
  // The document's length larger than what follows it.
  std::string longer = bytes;
  longer[0] = '\xff';
  expect_invalid(longer, "longer than");
  // A document that is not CBOR.
  std::string garbage = bytes;
  garbage[8] = '\xff';
  expect_invalid(garbage, "not valid CBOR");
  // Cut anywhere: the framing, the document or a reference fails, never a crash.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    try {
      const BlockReader reader(std::string_view(bytes).substr(0, cut), "the program");
      reader.block(reader.document().at("r"), "r");
      FAIL() << "cut at " << cut << " read";
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel) << "cut at " << cut;
    } catch (const json::exception&) {
      // at("r") on a document cut before its key: the callers' json_field says where.
    }
  }
}

}  // namespace
