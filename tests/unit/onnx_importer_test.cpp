// Import of real and hostile ONNX files.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <sys/stat.h>
#include <unistd.h>

#include <tuple>

#include "model_builder.hpp"
#include "runtime/onnx/onnx_importer.hpp"

namespace fs = std::filesystem;
using kiln::ir::ErrorKind;
using kiln::onnx_import::import_model_bytes;
using kiln::onnx_import::import_model_file;
using kiln::test::ModelBuilder;

namespace {

std::string digits_path() { return std::string(KILN_SOURCE_DIR) + "/examples/digits/digits.onnx"; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Expects import to fail with `kind` and a message containing `needle`.
void expect_error(const std::string& bytes, ErrorKind kind, const std::string& needle,
                  const kiln::onnx_import::ImportOptions& opts = {}) {
  try {
    import_model_bytes(bytes.data(), bytes.size(), "test.onnx", opts);
    FAIL() << "import succeeded, expected an error containing '" << needle << "'";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(OnnxImporter, LoadsTheShippedDigitsModel) {
  auto m = import_model_file(digits_path());
  ASSERT_TRUE(m.graph);
  EXPECT_EQ(m.opset(), 13);
  ASSERT_EQ(m.graph->inputs.size(), 1u);
  const auto& in = m.graph->inputs[0];
  EXPECT_EQ(in.name, "image");
  EXPECT_EQ(in.dtype, kiln::ir::DType::Float32);
  ASSERT_EQ(in.shape.rank(), 4);
  EXPECT_EQ(in.shape.dims[0].symbol, "batch");
  EXPECT_EQ(*in.shape.dims[1].value, 1);
  EXPECT_EQ(m.graph->nodes.size(), 5u);
  EXPECT_EQ(m.graph->initializers.at("w1").dims(), (kiln::ir::Dims{64, 64}));
}

TEST(OnnxImporter, EveryTruncationIsAnErrorNeverACrash) {
  std::string bytes = read_all(digits_path());
  ASSERT_GT(bytes.size(), 1000u);
  int errors = 0;
  for (size_t len = 0; len < bytes.size(); len += (len < 200 ? 1 : 61)) {
    try {
      import_model_bytes(bytes.data(), len, "truncated.onnx");
    } catch (const kiln::ir::Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("truncated.onnx"), std::string::npos);
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(OnnxImporter, FlippedBytesAreAnErrorOrAValidModelNeverACrash) {
  std::string bytes = read_all(digits_path());
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string copy = bytes;
    for (int k = 0; k < 4; ++k) copy[rng() % copy.size()] ^= char(1 << (rng() % 8));
    try {
      import_model_bytes(copy.data(), copy.size(), "flipped.onnx");
    } catch (const kiln::ir::Error&) {
    }
  }
}

TEST(OnnxImporter, GarbageAndEmptyFiles) {
  expect_error("", ErrorKind::InvalidModel, "empty");
  expect_error("this is not a protobuf at all \xff\xff\xff\xff", ErrorKind::InvalidModel, "not a valid ONNX model");
  try {
    import_model_file("/nonexistent/model.onnx");
    FAIL();
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.onnx"), std::string::npos);
  }
}

namespace {

// A 1000-float initializer 'weights' with 12 bytes of raw data.
std::string short_raw_data_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  onnx::TensorProto w;
  w.set_name("weights");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(1000);
  w.set_raw_data(std::string(12, '\0'));
  b.initializer(w);
  b.node("Add", {"x", "weights"}, {"y"});
  return b.bytes();
}

}  // namespace

TEST(OnnxImporter, RawDataOfTheWrongSizeNamesTheTensor) {
  expect_error(short_raw_data_model(), ErrorKind::InvalidModel, "'weights'");
}

TEST(OnnxImporter, HugeDimensionsAreRejectedBeforeAllocating) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  onnx::TensorProto w;
  w.set_name("huge");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(int64_t(1) << 40);
  w.add_dims(int64_t(1) << 40);
  b.initializer(w);
  expect_error(b.bytes(), ErrorKind::InvalidModel, "huge");

  ModelBuilder c;
  onnx::TensorProto big;
  big.set_name("big");
  big.set_data_type(onnx::TensorProto::FLOAT);
  big.add_dims(int64_t(1) << 33);  // 32 GiB claimed, no data
  c.initializer(big);
  expect_error(c.bytes(), ErrorKind::InvalidModel, "big");
}

TEST(OnnxImporter, NegativeDimensionsAndUnknownTypes) {
  ModelBuilder b;
  onnx::TensorProto w = ModelBuilder::float_tensor("neg", {}, {});
  w.add_dims(-3);
  b.initializer(w);
  expect_error(b.bytes(), ErrorKind::InvalidModel, "negative");

  ModelBuilder c;
  onnx::TensorProto t = ModelBuilder::float_tensor("odd", {1}, {1.0f});
  t.set_data_type(99);
  c.initializer(t);
  expect_error(c.bytes(), ErrorKind::InvalidModel, "unknown element type");
}

TEST(OnnxImporter, SequenceAndOptionalInputsAreImportedMapsAreUnsupported) {
  ModelBuilder b;
  b.typed_input("seq", ModelBuilder::sequence_type(1)).typed_input("opt", ModelBuilder::optional_type(7, true));
  const std::string bytes = b.bytes();
  auto m = import_model_bytes(bytes.data(), bytes.size(), "values.onnx");
  EXPECT_EQ(m.graph->inputs[0].kind, kiln::ir::ValueKind::Sequence);
  EXPECT_EQ(m.graph->inputs[0].dtype, kiln::ir::DType::Float32);
  EXPECT_EQ(m.graph->inputs[1].kind, kiln::ir::ValueKind::Optional);
  EXPECT_EQ(m.graph->inputs[1].element_kind, kiln::ir::ValueKind::Sequence);
  EXPECT_EQ(m.graph->inputs[1].dtype, kiln::ir::DType::Int64);

  ModelBuilder maps;
  auto* in = maps.graph().add_input();
  in->set_name("map");
  in->mutable_type()->mutable_map_type()->set_key_type(7);
  expect_error(maps.bytes(), ErrorKind::Unsupported, "input 'map' is a map");
}

TEST(OnnxImporter, UnknownDomainIsAnErrorOnlyIfNotImported) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.node("Custom", {"x"}, {"y"}).set_domain("com.example");
  expect_error(b.bytes(), ErrorKind::InvalidModel, "com.example");

  auto* o = b.model().add_opset_import();
  o->set_domain("com.example");
  o->set_version(1);
  std::string bytes = b.bytes();
  auto m = import_model_bytes(bytes.data(), bytes.size(), "custom.onnx");
  EXPECT_EQ(m.graph->nodes[0].domain, "com.example");
}

TEST(OnnxImporter, ConstantsBecomeInitializersAndInitializerInputsHaveDefaults) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", 2}).input("bias", onnx::TensorProto::FLOAT, {2});
  b.output("y", onnx::TensorProto::FLOAT, {"batch", 2});
  b.initializer(ModelBuilder::float_tensor("bias", {2}, {1, 2}));
  auto& c = b.node("Constant", {}, {"k"});
  ModelBuilder::attr_tensor(c, "value", ModelBuilder::float_tensor("", {2}, {3, 4}));
  b.node("Add", {"x", "bias"}, {"t"});
  b.node("Mul", {"t", "k"}, {"y"});
  std::string bytes = b.bytes();
  auto m = import_model_bytes(bytes.data(), bytes.size(), "const.onnx");
  EXPECT_EQ(m.graph->nodes.size(), 2u);
  ASSERT_TRUE(m.graph->initializers.count("k"));
  EXPECT_FLOAT_EQ(m.graph->initializers.at("k").data<float>()[1], 4.0f);
  auto required = m.graph->required_inputs();
  ASSERT_EQ(required.size(), 1u);
  EXPECT_EQ(required[0]->name, "x");
}

TEST(OnnxImporter, UnnamedDimsAndNodesGetNames) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"", 3}).output("y", onnx::TensorProto::FLOAT, {"", 3});
  b.node("Relu", {"x"}, {"y"});
  std::string bytes = b.bytes();
  auto m = import_model_bytes(bytes.data(), bytes.size(), "m.onnx");
  EXPECT_FALSE(m.graph->inputs[0].shape.dims[0].is_known());
  EXPECT_TRUE(m.graph->inputs[0].shape.dims[0].symbol.empty());
  EXPECT_EQ(m.graph->nodes[0].name, "Relu_0");
}

TEST(OnnxImporter, ExternalDataIsReadCheckedAndConfined) {
  fs::path dir = fs::temp_directory_path() / ("kiln_ext_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "weights.bin", std::ios::binary);
    float values[4] = {1, 2, 3, 4};
    out.write("PAD!", 4);
    out.write(reinterpret_cast<const char*>(values), sizeof(values));
  }
  auto make = [&](const std::string& location, const std::string& offset, int64_t dim) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {dim}).output("y", onnx::TensorProto::FLOAT, {dim});
    onnx::TensorProto w;
    w.set_name("w");
    w.set_data_type(onnx::TensorProto::FLOAT);
    w.add_dims(dim);
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = w.add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    kv = w.add_external_data();
    kv->set_key("offset");
    kv->set_value(offset);
    b.initializer(w);
    b.node("Add", {"x", "w"}, {"y"});
    return b.bytes();
  };
  kiln::onnx_import::ImportOptions opts;
  opts.external_data_dir = dir.string();

  std::string good = make("weights.bin", "4", 4);
  auto m = import_model_bytes(good.data(), good.size(), "ext.onnx", opts);
  EXPECT_FLOAT_EQ(m.graph->initializers.at("w").data<float>()[3], 4.0f);

  expect_error(make("weights.bin", "4", 5), ErrorKind::InvalidModel, "too short", opts);
  expect_error(make("weights.bin", "999", 4), ErrorKind::InvalidModel, "offset", opts);
  expect_error(make("../etc/passwd", "0", 4), ErrorKind::InvalidModel, "inside the model's directory", opts);
  expect_error(make("/etc/passwd", "0", 4), ErrorKind::InvalidModel, "inside the model's directory", opts);
  expect_error(make("missing.bin", "0", 4), ErrorKind::Io, "missing.bin", opts);
  expect_error(make("weights.bin", "4", 4), ErrorKind::InvalidModel, "loaded from memory");

  // A link inside the directory may point within it, never out of it.
  fs::create_directories(dir / "sub");
  fs::create_symlink(dir / "weights.bin", dir / "sub" / "alias.bin");
  std::string aliased = make("sub/alias.bin", "4", 4);
  EXPECT_FLOAT_EQ(
      import_model_bytes(aliased.data(), aliased.size(), "ext.onnx", opts).graph->initializers.at("w").data<float>()[0], 1.0f);
  const fs::path outside = fs::temp_directory_path() / ("kiln_ext_outside_" + std::to_string(::getpid()));
  fs::create_directories(outside);
  fs::copy_file(dir / "weights.bin", outside / "secret.bin");
  fs::create_symlink(outside / "secret.bin", dir / "leak.bin");
  expect_error(make("leak.bin", "4", 4), ErrorKind::InvalidModel, "outside the model's directory", opts);
  fs::create_directory_symlink(outside, dir / "linked_dir");
  expect_error(make("linked_dir/secret.bin", "4", 4), ErrorKind::InvalidModel, "outside the model's directory", opts);
  fs::remove_all(outside);
  fs::remove_all(dir);
}

// Reading a FIFO waits for a writer that never comes; a directory or a
// device is no weights file either. Each is an error at once.
TEST(OnnxImporter, OnlyRegularFilesAreOpened) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_fifo_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "model.onnx").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir / "weights.bin").c_str(), 0600), 0);
  try {
    import_model_file((dir / "model.onnx").string());
    ADD_FAILURE() << "a FIFO was accepted as a model";
  } catch (const kiln::ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(import_model_file(dir.string()), kiln::ir::Error);
  EXPECT_THROW(import_model_file("/dev/zero"), kiln::ir::Error);

  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {4}).output("y", onnx::TensorProto::FLOAT, {4});
  onnx::TensorProto w;
  w.set_name("w");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(4);
  w.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w.add_external_data();
  kv->set_key("location");
  kv->set_value("weights.bin");
  b.initializer(w);
  b.node("Add", {"x", "w"}, {"y"});
  kiln::onnx_import::ImportOptions opts;
  opts.external_data_dir = dir.string();
  expect_error(b.bytes(), ErrorKind::Io, "not a regular file", opts);
  fs::remove_all(dir);
}

TEST(OnnxImporter, OpsetsOutsideWhatKilnImplementsAreErrors) {
  for (const auto& [version, kind, needle] : std::vector<std::tuple<int64_t, ErrorKind, std::string>>{
           {99, ErrorKind::Unsupported, "opset 99"},
           {kiln::onnx_import::kMaxOpset + 1, ErrorKind::Unsupported, "opsets 1 to"},
           {0, ErrorKind::InvalidModel, "version 0"},
           {-3, ErrorKind::InvalidModel, "version -3"}}) {
    SCOPED_TRACE(version);
    ModelBuilder b(version);
    b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
    b.node("Relu", {"x"}, {"y"});
    expect_error(b.bytes(), kind, needle);
  }
  ModelBuilder b(kiln::onnx_import::kMaxOpset);
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.node("Relu", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_EQ(import_model_bytes(bytes.data(), bytes.size(), "m.onnx").opset(), kiln::onnx_import::kMaxOpset);
}

TEST(OnnxImporter, DeeplyNestedSubgraphsAreRejected) {
  onnx::GraphProto inner;
  inner.set_name("leaf");
  for (int depth = 0; depth < 80; ++depth) {
    onnx::GraphProto outer;
    outer.set_name("level" + std::to_string(depth));
    auto* n = outer.add_node();
    n->set_op_type("If");
    n->add_input("c");
    ModelBuilder::attr_graph(*n, "then_branch", inner);
    inner = outer;
  }
  ModelBuilder b;
  b.graph() = inner;
  std::string bytes = b.bytes();
  try {
    import_model_bytes(bytes.data(), bytes.size(), "deep.onnx");
    FAIL();
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidModel);
  }
}

namespace {

std::string write_temp(const std::string& name, const std::string& bytes) {
  const fs::path path = fs::temp_directory_path() / ("kiln_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return path.string();
}

kiln::ir::Model import_keeping_weights(const std::string& path) {
  kiln::onnx_import::ImportOptions opts;
  opts.keep_weights_in_file = true;
  return import_model_file(path, opts);
}

// own_weights refuses a model whose files changed since it was loaded, with
// an Io error containing `needle`.
void expect_own_weights_refused(kiln::ir::Model& model, const std::string& needle) {
  try {
    kiln::onnx_import::own_weights(model);
    ADD_FAILURE() << "weights changed under the model were accepted";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A model with weights of every kind: raw data (also one that is a graph
// input, and one of zero bytes), typed data, and a Constant node.
std::string mixed_weights_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {3}).input("bias", onnx::TensorProto::FLOAT, {3});
  b.output("y", onnx::TensorProto::FLOAT, {3});
  auto raw = [](const std::string& name, std::vector<float> values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(int64_t(values.size()));
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return t;
  };
  b.initializer(raw("w", {1.5f, -2, 3}));
  b.initializer(raw("bias", {0.25f, 0.5f, 0.75f}));
  b.initializer(raw("empty", {}));
  b.initializer(ModelBuilder::float_tensor("typed", {3}, {7, 8, 9}));
  auto& c = b.node("Constant", {}, {"k"});
  ModelBuilder::attr_tensor(c, "value", ModelBuilder::float_tensor("", {3}, {3, 4, 5}));
  b.node("Mul", {"x", "w"}, {"t"});
  b.node("Add", {"t", "bias"}, {"u"});
  b.node("Mul", {"u", "typed"}, {"v"});
  b.node("Add", {"v", "k"}, {"y"});
  return b.bytes();
}

}  // namespace

TEST(OnnxImporter, WeightsKeptInTheFileAreTheSameWeights) {
  for (const std::string& path : {digits_path(), write_temp("mixed.onnx", mixed_weights_model())}) {
    SCOPED_TRACE(path);
    const auto copied = import_model_file(path);
    auto kept = import_keeping_weights(path);
    EXPECT_FALSE(copied.mapped_file);
    ASSERT_TRUE(kept.mapped_file);
    EXPECT_EQ(kept.content_hash, copied.content_hash);
    EXPECT_EQ(kept.graph->nodes.size(), copied.graph->nodes.size());
    ASSERT_EQ(kept.graph->initializers.size(), copied.graph->initializers.size());
    int in_file = 0;
    for (const auto& [name, t] : kept.graph->initializers) in_file += t.owner() == kept.mapped_file;
    EXPECT_GT(in_file, 0);

    kiln::onnx_import::own_weights(kept);
    EXPECT_FALSE(kept.mapped_file);
    for (const auto& [name, t] : kept.graph->initializers) {
      const auto& want = copied.graph->initializers.at(name);
      ASSERT_EQ(t.dims(), want.dims()) << name;
      ASSERT_EQ(t.nbytes(), want.nbytes()) << name;
      EXPECT_EQ(std::memcmp(t.raw(), want.raw(), t.nbytes()), 0) << name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << name;
    }
    kiln::onnx_import::own_weights(kept);  // a second call has nothing to do
    if (path != digits_path()) fs::remove(path);
  }
}

TEST(OnnxImporter, KeepingWeightsTruncatedOrWrongSizedFilesAreErrorsNeverCrashes) {
  const std::string bytes = mixed_weights_model();
  int errors = 0;
  for (size_t len = 1; len < bytes.size(); len += 3) {
    const std::string path = write_temp("cut.onnx", bytes.substr(0, len));
    try {
      auto m = import_keeping_weights(path);
      kiln::onnx_import::own_weights(m);
    } catch (const kiln::ir::Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    fs::remove(path);
  }
  EXPECT_GT(errors, int(bytes.size() / 6));

  // Flipped bits anywhere (lengths and tags included): an error or a model,
  // whose weights then copy out (a hash mismatch is impossible: the file
  // does not change), never a crash.
  std::mt19937 rng(11);
  for (const std::string& original : {bytes, read_all(digits_path())}) {
    for (int i = 0; i < 150; ++i) {
      std::string copy = original;
      for (int k = 0; k < 3; ++k) copy[rng() % copy.size()] ^= char(1 << (rng() % 8));
      const std::string path = write_temp("flipped.onnx", copy);
      try {
        auto m = import_keeping_weights(path);
        kiln::onnx_import::own_weights(m);
      } catch (const kiln::ir::Error&) {
      }
      fs::remove(path);
    }
  }

  const std::string path = write_temp("short.onnx", short_raw_data_model());
  try {
    import_keeping_weights(path);
    ADD_FAILURE() << "a tensor with too few bytes was accepted";
  } catch (const kiln::ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'weights'"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(OnnxImporter, AFileRewrittenAfterLoadingIsAnErrorAndARenamedOneIsNot) {
  const std::string bytes = mixed_weights_model();
  const std::string path = write_temp("rewritten.onnx", bytes);

  // Replaced by a rename: the loaded model keeps the file it mapped.
  auto renamed = import_keeping_weights(path);
  std::string other = bytes;
  const size_t at = other.find(std::string("\x00\x00\xc0\x3f", 4));  // 1.5f, the first weight
  ASSERT_NE(at, std::string::npos);
  other[at + 3] = 0x40;  // 1.5f -> 3.5f
  const std::string next = write_temp("next.onnx", other);
  fs::rename(next, path);
  kiln::onnx_import::own_weights(renamed);
  EXPECT_FLOAT_EQ(renamed.graph->initializers.at("w").data<float>()[0], 1.5f);

  // Rewritten in place, same size: the weights no longer hash to the key.
  auto rewritten = import_keeping_weights(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  expect_own_weights_refused(rewritten, "changed on disk");

  // Cut short in place: reported before any byte past the end is read.
  auto cut = import_keeping_weights(path);
  fs::resize_file(path, bytes.size() / 2);
  EXPECT_THROW(kiln::onnx_import::own_weights(cut), kiln::ir::Error);
  fs::remove(path);
}

// The file is hashed in 4 MiB blocks on several threads: the identity must
// not depend on how many, must see a change in any block, and must equal
// that of the same bytes loaded from memory.
TEST(OnnxImporter, ContentHashSeesEveryBlockWhateverTheThreadCount) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {3, 1100000});
  b.output("y", onnx::TensorProto::FLOAT, {3, 1100000});
  onnx::TensorProto w;
  w.set_name("w");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(3);
  w.add_dims(1100000);
  std::string data(size_t(3 * 1100000) * sizeof(float), '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 131 % 251);
  w.set_raw_data(data);
  b.initializer(w);
  b.node("Add", {"x", "w"}, {"y"});
  const std::string bytes = b.bytes();
  ASSERT_GT(bytes.size(), size_t(12) << 20);  // three full blocks and part of a fourth
  const std::string path = write_temp("blocks.onnx", bytes);
  auto hash = [](const std::string& file, int threads) {
    kiln::onnx_import::ImportOptions opts;
    opts.keep_weights_in_file = true;
    opts.hash_threads = threads;
    return import_model_file(file, opts).content_hash;
  };
  const std::string one = hash(path, 1);
  EXPECT_EQ(hash(path, 2), one);
  EXPECT_EQ(hash(path, 7), one);
  kiln::onnx_import::ImportOptions opts;
  opts.hash_threads = 3;
  EXPECT_EQ(kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "<memory>", opts).content_hash, one);
  // A weight's byte changed in the first, a middle and the last (partial) block.
  const size_t start = bytes.find(data.substr(0, 256)), end = start + data.size();
  ASSERT_LT(start, size_t(4) << 20);
  ASSERT_GT(end, size_t(12) << 20);
  std::set<std::string> seen = {one};
  for (size_t at : {start + 1, (size_t(6) << 20) + 5, end - 3}) {
    std::string changed = bytes;
    changed[at] = char(changed[at] ^ 0x40);
    const std::string other = write_temp("blocks_changed.onnx", changed);
    EXPECT_TRUE(seen.insert(hash(other, 2)).second) << "byte " << at;
  }
  // Weights still in the file are checked against the same identity before a compile copies them.
  auto kept = import_keeping_weights(path);
  EXPECT_NO_THROW(kiln::onnx_import::own_weights(kept));
}

// Loading a model keeps external data in its files too (a 2 GiB model has
// all its weights there): views until own_weights, each file read once to
// hash it, or not at all when its hash is remembered.
TEST(OnnxImporter, ExternalDataStaysInItsFileUntilOwned) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_ext_kept_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const float values[6] = {1, 2, 3, 4, 5, 6};
  std::ofstream(dir / "weights.bin", std::ios::binary).write(reinterpret_cast<const char*>(values), sizeof values);
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {3}).output("y", onnx::TensorProto::FLOAT, {3});
  for (const char* name : {"a", "b"}) {
    onnx::TensorProto w;
    w.set_name(name);
    w.set_data_type(onnx::TensorProto::FLOAT);
    w.add_dims(3);
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [key, value] :
         {std::pair<const char*, const char*>{"location", "weights.bin"}, {"offset", name[0] == 'a' ? "0" : "12"}}) {
      auto* kv = w.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    }
    b.initializer(w);
  }
  b.node("Add", {"x", "a"}, {"t"});
  b.node("Add", {"t", "b"}, {"y"});
  const std::string path = (dir / "model.onnx").string();
  std::ofstream(path, std::ios::binary) << b.bytes();

  const auto copied = import_model_file(path);
  auto kept = import_keeping_weights(path);
  ASSERT_TRUE(kept.mapped_file);
  EXPECT_EQ(kept.graph->initializers.at("b").owner(), kept.mapped_file);
  EXPECT_EQ(kept.content_hash, copied.content_hash);
  kiln::onnx_import::own_weights(kept);
  EXPECT_FALSE(kept.mapped_file);
  EXPECT_FLOAT_EQ(kept.graph->initializers.at("a").data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(kept.graph->initializers.at("b").data<float>()[2], 6.0f);
  EXPECT_FLOAT_EQ(copied.graph->initializers.at("b").data<float>()[2], 6.0f);

  // Both files go to the memo; a remembered hash of the data file stands in for it.
  kiln::onnx_import::ImportOptions opts;
  opts.keep_weights_in_file = true;
  std::map<std::string, std::string> told;
  opts.remember_file_hash = [&](const std::string& file, const struct stat&, const timespec&, const std::string& hex) {
    told[file] = hex;
  };
  EXPECT_EQ(import_model_file(path, opts).content_hash, copied.content_hash);
  ASSERT_EQ(told.size(), 2u);
  const std::string data = (dir / "weights.bin").string();
  ASSERT_TRUE(told.count(data));
  struct stat data_st{};
  ASSERT_EQ(::stat(data.c_str(), &data_st), 0);
  opts.recall_file_hash = [&](const struct stat& st) {
    return st.st_ino == data_st.st_ino ? std::string(32, '0') : std::string();
  };
  EXPECT_NE(import_model_file(path, opts).content_hash, copied.content_hash);

  // A weight changed in place: another model, and one loaded before cannot take it.
  auto before = import_keeping_weights(path);
  const float changed = 9;
  std::fstream(data, std::ios::in | std::ios::out | std::ios::binary)
      .write(reinterpret_cast<const char*>(&changed), sizeof changed);
  EXPECT_NE(import_keeping_weights(path).content_hash, copied.content_hash);
  expect_own_weights_refused(before, "weights.bin");
  fs::remove_all(dir);
}

// A remembered file hash stands in for reading the file (the cache's memo,
// src/cache/hash_memo.hpp); a file it does not know is hashed and told.
TEST(OnnxImporter, ARememberedFileHashIsUsedAndAnUnknownOneIsTold) {
  const std::string path = write_temp("memo.onnx", mixed_weights_model());
  struct stat file{};
  ASSERT_EQ(::stat(path.c_str(), &file), 0);
  std::string told;
  kiln::onnx_import::ImportOptions opts;
  opts.keep_weights_in_file = true;
  opts.recall_file_hash = [&](const struct stat& st) {
    EXPECT_EQ(st.st_ino, file.st_ino);
    return std::string();
  };
  opts.remember_file_hash = [&](const std::string& remembered, const struct stat& st, const timespec& looked_at,
                                const std::string& hex) {
    EXPECT_EQ(remembered, path);
    EXPECT_EQ(st.st_ino, file.st_ino);
    EXPECT_LE(looked_at.tv_sec, ::time(nullptr));
    told = hex;
  };
  const std::string read = import_model_file(path, opts).content_hash;
  ASSERT_EQ(told.size(), 32u);
  EXPECT_EQ(read, import_keeping_weights(path).content_hash);

  // Recalled: the file is not hashed (another recalled hash, another identity) nor told again.
  opts.recall_file_hash = [known = told](const struct stat&) { return known; };
  told.clear();
  EXPECT_EQ(import_model_file(path, opts).content_hash, read);
  EXPECT_TRUE(told.empty());
  opts.recall_file_hash = [&](const struct stat&) { return std::string(32, '0'); };
  EXPECT_NE(import_model_file(path, opts).content_hash, read);
  opts.recall_file_hash = [&](const struct stat&) { return std::string("not a hash"); };
  EXPECT_EQ(import_model_file(path, opts).content_hash, read);
  fs::remove(path);
}

TEST(OnnxImporter, WeightsCopiedFromTheFileInPiecesAreTheFilesBytes) {
  // A weight of more than three 4 MiB pieces, one of an odd size, one of one
  // element: every copy piece must land where its tensor's view says.
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1});
  b.output("y", onnx::TensorProto::FLOAT, {1});
  std::map<std::string, std::string> data;
  int64_t lengths[] = {3300001, 1001, 1};
  for (int i = 0; i < 3; ++i) {
    onnx::TensorProto w;
    w.set_name("w" + std::to_string(i));
    w.set_data_type(onnx::TensorProto::FLOAT);
    w.add_dims(lengths[i]);
    std::string bytes(size_t(lengths[i]) * sizeof(float), '\0');
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = char((k * 131 + size_t(i) * 7) % 251);
    w.set_raw_data(bytes);
    data[w.name()] = bytes;
    b.initializer(w);
    b.node("ReduceSum", {w.name()}, {"s" + std::to_string(i)});
  }
  b.node("Sum", {"x", "s0", "s1", "s2"}, {"y"});
  const std::string path = write_temp("pieces.onnx", b.bytes());
  for (int threads : {1, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " thread(s)");
    kiln::onnx_import::ImportOptions opts;
    opts.keep_weights_in_file = true;
    opts.hash_threads = threads;
    auto kept = import_model_file(path, opts);
    kiln::onnx_import::own_weights(kept);
    EXPECT_FALSE(kept.mapped_file);
    for (const auto& [name, bytes] : data) {
      const auto& t = kept.graph->initializers.at(name);
      ASSERT_EQ(t.nbytes(), bytes.size()) << name;
      EXPECT_EQ(std::memcmp(t.raw(), bytes.data(), bytes.size()), 0) << name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << name;
    }
  }
  fs::remove(path);
}
