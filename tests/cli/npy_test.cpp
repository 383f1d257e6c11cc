// The .npy reader (src/cli/npy_reader.cpp) on what numpy writes, on what
// npy::save writes, and on hostile files: each refusal is a kiln::Error that
// names the file and what was expected, never a crash, a hang or an
// allocation that the file cannot back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "cli/npy.hpp"

namespace fs = std::filesystem;
using kiln::DType;
using kiln::Shape;

namespace {

const std::string kNumpyFiles = std::string(KILN_SOURCE_DIR) + "/tests/cli/npy_data/";

// Per-process paths: ctest runs tests in parallel processes.
fs::path temp_path(const std::string& name) { return fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid())); }

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Magic, version, header length, `header` as given, then `data_bytes` zeros.
std::string npy_raw(const std::string& header, size_t data_bytes, int major = 1) {
  std::string bytes = "\x93NUMPY";
  bytes += char(major);
  bytes += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) bytes += char((header.size() >> (8 * i)) & 0xff);
  return bytes + header + std::string(data_bytes, '\0');
}

// As numpy lays a file out: the dict padded with spaces to a multiple of 64
// and ended by '\n'.
std::string npy_file(const std::string& dict, size_t data_bytes, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((prefix + header.size() + 1 + 63) / 64 * 64 - prefix - header.size() - 1, ' ');
  return npy_raw(header + '\n', data_bytes, major);
}

std::string dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// Element i of the arrays make_npy_data.py writes, as a double.
double element(const kiln::Tensor& t, int64_t i) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::Float32: return static_cast<const float*>(p)[i];
    case DType::Float64: return static_cast<const double*>(p)[i];
    case DType::Float16: {
      // Small integers only: 1.0 is 0x3c00, and each doubling adds 0x400.
      const uint16_t h = static_cast<const uint16_t*>(p)[i];
      if (h == 0) return 0;
      const int exponent = (h >> 10) - 15;
      return std::ldexp(1.0 + (h & 0x3ff) / 1024.0, exponent);
    }
    case DType::Int8: return static_cast<const int8_t*>(p)[i];
    case DType::UInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::Int16: return static_cast<const int16_t*>(p)[i];
    case DType::UInt16: return static_cast<const uint16_t*>(p)[i];
    case DType::Int32: return static_cast<const int32_t*>(p)[i];
    case DType::UInt32: return static_cast<const uint32_t*>(p)[i];
    case DType::Int64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::UInt64: return double(static_cast<const uint64_t*>(p)[i]);
    case DType::Bool: return static_cast<const uint8_t*>(p)[i];
    default: ADD_FAILURE() << "unexpected dtype"; return -1;
  }
}

// Loads `path` expecting a refusal; returns the message.
std::string refusal(const fs::path& path, kiln::ErrorCode code = kiln::ErrorCode::InvalidArgument) {
  try {
    kiln::npy::load(path.string());
  } catch (const kiln::Error& e) {
    EXPECT_EQ(int(e.code()), int(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + path.string() + "'"), std::string::npos) << "the file is not named: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << path << " was accepted";
  return "";
}

// ---- files numpy wrote (tests/cli/npy_data/make_npy_data.py) ----------

struct NumpyFile {
  const char* name;
  DType dtype;
  Shape shape;
};

class NpyNumpyFiles : public ::testing::TestWithParam<NumpyFile> {};

TEST_P(NpyNumpyFiles, LoadWithTheirValues) {
  const NumpyFile& f = GetParam();
  const kiln::Tensor t = kiln::npy::load(kNumpyFiles + f.name + ".npy");
  EXPECT_EQ(t.dtype(), f.dtype);
  EXPECT_EQ(t.shape(), f.shape);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(element(t, i), f.dtype == DType::Bool ? i % 2 : i % 7) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Npy, NpyNumpyFiles,
    ::testing::Values(NumpyFile{"float32_2x3", DType::Float32, {2, 3}}, NumpyFile{"float64_scalar", DType::Float64, {}},
                      NumpyFile{"float16_5", DType::Float16, {5}}, NumpyFile{"int8_3x1", DType::Int8, {3, 1}},
                      NumpyFile{"uint8_4", DType::UInt8, {4}}, NumpyFile{"int16_2x2", DType::Int16, {2, 2}},
                      NumpyFile{"uint16_3", DType::UInt16, {3}}, NumpyFile{"int32_1x2x3", DType::Int32, {1, 2, 3}},
                      NumpyFile{"uint32_2", DType::UInt32, {2}}, NumpyFile{"int64_7", DType::Int64, {7}},
                      NumpyFile{"uint64_2x1", DType::UInt64, {2, 1}}, NumpyFile{"bool_6", DType::Bool, {6}},
                      NumpyFile{"float32_empty", DType::Float32, {0, 3}}, NumpyFile{"int16_2x3_v2", DType::Int16, {2, 3}},
                      NumpyFile{"float32_4_v3", DType::Float32, {4}}),
    [](const auto& info) { return std::string(info.param.name); });

struct RefusedNumpyFile {
  const char* name;
  const char* message;
};

class NpyRefusedNumpyFiles : public ::testing::TestWithParam<RefusedNumpyFile> {};

TEST_P(NpyRefusedNumpyFiles, AreRefusedSayingWhy) {
  const std::string message = refusal(kNumpyFiles + GetParam().name + ".npy");
  EXPECT_NE(message.find(GetParam().message), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Npy, NpyRefusedNumpyFiles,
    ::testing::Values(RefusedNumpyFile{"fortran_float32_2x3", "Fortran (column-major) order is not supported"},
                      RefusedNumpyFile{"bigendian_float32_3", "element type '>f4' is not supported (little-endian"},
                      RefusedNumpyFile{"complex64_2", "element type '<c8' is not supported"},
                      RefusedNumpyFile{"structured_2",
                                       "expected the element type, a string such as '<f4' at byte 10, found '['"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- what npy::save writes ---------------------------------------------

struct SavedArray {
  const char* name;
  DType dtype;
  Shape shape;
};

class NpySaved : public ::testing::TestWithParam<SavedArray> {};

TEST_P(NpySaved, LoadsBackBitForBit) {
  const SavedArray& a = GetParam();
  kiln::Tensor t(a.dtype, a.shape);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = a.dtype == DType::Bool ? i % 2 : uint8_t(i * 37 + 11);
  const fs::path path = temp_path(std::string("npy_saved_") + a.name + ".npy");
  kiln::npy::save(path.string(), t);
  const kiln::Tensor back = kiln::npy::load(path.string());
  // numpy's layout: the data starts on a 64-byte boundary.
  EXPECT_EQ((fs::file_size(path) - t.nbytes()) % 64, 0u);
  fs::remove(path);
  EXPECT_EQ(back.dtype(), a.dtype);
  EXPECT_EQ(back.shape(), a.shape);
  ASSERT_EQ(back.nbytes(), t.nbytes());
  EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
}

std::vector<SavedArray> saved_arrays() {
  const std::pair<const char*, DType> dtypes[] = {
      {"float32", DType::Float32}, {"float64", DType::Float64}, {"float16", DType::Float16}, {"int8", DType::Int8},
      {"uint8", DType::UInt8},     {"int16", DType::Int16},     {"uint16", DType::UInt16},   {"int32", DType::Int32},
      {"uint32", DType::UInt32},   {"int64", DType::Int64},     {"uint64", DType::UInt64},   {"bool", DType::Bool}};
  const std::pair<const char*, Shape> shapes[] = {{"scalar", {}}, {"empty", {0}}, {"5", {5}}, {"2x3x4", {2, 3, 4}}};
  static std::vector<std::string> names;  // SavedArray holds pointers into it
  names.reserve(std::size(dtypes) * std::size(shapes));
  std::vector<SavedArray> arrays;
  for (const auto& [dname, dtype] : dtypes)
    for (const auto& [sname, shape] : shapes) {
      names.push_back(std::string(dname) + "_" + sname);
      arrays.push_back({names.back().c_str(), dtype, shape});
    }
  return arrays;
}

INSTANTIATE_TEST_SUITE_P(Npy, NpySaved, ::testing::ValuesIn(saved_arrays()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- headers numpy writes or reads alike --------------------------------

struct AcceptedHeader {
  const char* name;
  std::string bytes;
  DType dtype;
  Shape shape;
};

class NpyAcceptedHeaders : public ::testing::TestWithParam<AcceptedHeader> {};

TEST_P(NpyAcceptedHeaders, Load) {
  const fs::path path = temp_path(std::string("npy_accepted_") + GetParam().name + ".npy");
  write_file(path, GetParam().bytes);
  const kiln::Tensor t = kiln::npy::load(path.string());
  fs::remove(path);
  EXPECT_EQ(t.dtype(), GetParam().dtype);
  EXPECT_EQ(t.shape(), GetParam().shape);
}

INSTANTIATE_TEST_SUITE_P(
    Npy, NpyAcceptedHeaders,
    ::testing::Values(AcceptedHeader{"numpy_style", npy_file(dict("<f4", "(2, 3)"), 24), DType::Float32, {2, 3}},
                      AcceptedHeader{"one_dim_with_its_comma", npy_file(dict("<i8", "(3,)"), 24), DType::Int64, {3}},
                      AcceptedHeader{"scalar", npy_file(dict("<f8", "()"), 8), DType::Float64, {}},
                      AcceptedHeader{"empty", npy_file(dict("<f4", "(0, 5)"), 0), DType::Float32, {0, 5}},
                      AcceptedHeader{"trailing_comma_in_a_shape", npy_file(dict("<f4", "(2, 3,)"), 24), DType::Float32, {2, 3}},
                      AcceptedHeader{"no_trailing_comma_in_the_dict",
                                     npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8),
                                     DType::Float32,
                                     {2}},
                      AcceptedHeader{"keys_in_another_order",
                                     npy_file("{'shape': (2,), 'fortran_order': False, 'descr': '<u2', }", 4),
                                     DType::UInt16,
                                     {2}},
                      AcceptedHeader{"more_spaces",
                                     npy_file("{ 'descr' : '<f4' ,  'fortran_order' : False , 'shape' : ( 2 , 3 ) , }", 24),
                                     DType::Float32,
                                     {2, 3}},
                      AcceptedHeader{"native_byte_order", npy_file(dict("=f4", "(2,)"), 8), DType::Float32, {2}},
                      AcceptedHeader{"no_byte_order", npy_file(dict("|f4", "(2,)"), 8), DType::Float32, {2}},
                      AcceptedHeader{"little_endian_byte", npy_file(dict("<u1", "(2,)"), 2), DType::UInt8, {2}},
                      AcceptedHeader{
                          "long_padding", npy_file(dict("<f4", "(1,)") + std::string(3000, ' '), 4), DType::Float32, {1}},
                      AcceptedHeader{"version_2", npy_file(dict("<f4", "(2,)"), 8, 2), DType::Float32, {2}},
                      AcceptedHeader{"version_3", npy_file(dict("|b1", "(2,)"), 2, 3), DType::Bool, {2}}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- hostile and malformed files ----------------------------------------

struct RefusedFile {
  const char* name;
  std::string bytes;
  const char* message;
};

class NpyRefusedFiles : public ::testing::TestWithParam<RefusedFile> {};

TEST_P(NpyRefusedFiles, AreRefusedSayingWhy) {
  const fs::path path = temp_path(std::string("npy_refused_") + GetParam().name + ".npy");
  write_file(path, GetParam().bytes);
  const std::string message = refusal(path);
  fs::remove(path);
  EXPECT_NE(message.find(GetParam().message), std::string::npos) << message;
  // Whatever the file holds, the message stays short.
  EXPECT_LT(message.size(), 600u) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Npy, NpyRefusedFiles,
    ::testing::Values(
        // std::regex recursed once per character here, overflowing the stack.
        RefusedFile{"long_descr", npy_file(dict(std::string(30000, 'x'), "(1,)"), 4),
                    "element type 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... is not supported"},
        RefusedFile{"deep_nesting", npy_file(dict("<f4", std::string(30000, '(')), 4), "expected a dimension"},
        RefusedFile{"negative_dim", npy_file(dict("<f4", "(-1, 784)"), 3136),
                    "expected a dimension (a non-negative decimal integer) at byte 51, found '-'"},
        RefusedFile{"letters_in_dims", npy_file(dict("<f4", "(a1,b784)"), 3136), "expected a dimension"},
        RefusedFile{"fractional_dim", npy_file(dict("<f4", "(1.5,)"), 4), "expected ',' or ')' in the shape"},
        RefusedFile{"number_not_tuple", npy_file(dict("<f4", "(3)"), 12), "shape (3) is a number, not a tuple"},
        RefusedFile{"leading_zero", npy_file(dict("<f4", "(03,)"), 12), "dimension '03' has a leading zero"},
        RefusedFile{"list_shape", npy_file(dict("<f4", "[3]"), 12), "expected '(' opening the shape"},
        RefusedFile{"dim_past_int64", npy_file(dict("<f4", "(9223372036854775808,)"), 4), "is too large"},
        RefusedFile{"element_count_past_64_bits", npy_file(dict("<f4", "(4294967296, 4294967296, 4294967296)"), 4),
                    "has more elements than 64 bits can count"},
        RefusedFile{"byte_count_past_64_bits", npy_file(dict("<f4", "(4611686018427387904,)"), 4),
                    "needs more than 2^64 data bytes, the file has 4"},
        RefusedFile{"claim_past_the_data", npy_file(dict("<f4", "(1000000000,)"), 64),
                    "shape 1000000000 of float32 needs 4000000000 data bytes, the file has 64"},
        RefusedFile{"one_byte_short", npy_file(dict("<f4", "(4,)"), 15), "needs 16 data bytes, the file has 15"},
        RefusedFile{"one_byte_extra", npy_file(dict("<f4", "(4,)"), 17), "needs 16 data bytes, the file has 17"},
        RefusedFile{"no_shape", npy_file("{'descr': '<f4', 'fortran_order': False, }", 4), "header: it has no 'shape'"},
        RefusedFile{"no_descr", npy_file("{'fortran_order': False, 'shape': (1,), }", 4), "header: it has no 'descr'"},
        RefusedFile{"key_twice", npy_file("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 4),
                    "key 'descr' appears twice"},
        RefusedFile{"unknown_key", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4),
                    "unexpected key 'x'"},
        RefusedFile{"double_quotes", npy_file("{\"descr\": '<f4', 'fortran_order': False, 'shape': (1,), }", 4),
                    "expected a key ('descr', 'fortran_order' or 'shape') or '}' at byte 1, found '\"'"},
        RefusedFile{"escape_in_descr", npy_file(dict("<f\\x34", "(1,)"), 4), "a printable character without escapes"},
        RefusedFile{"unterminated_string", npy_raw("{'descr': '<f4", 0), "unterminated string starting at byte 10"},
        RefusedFile{"newline_in_a_string", npy_file("{'descr': '<f4", 0), "a printable character without escapes in a string"},
        RefusedFile{"fortran_order_not_a_bool", npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", 4),
                    "expected True or False for 'fortran_order'"},
        RefusedFile{"fortran_order_true", npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16),
                    "Fortran (column-major) order is not supported"},
        RefusedFile{"big_endian", npy_file(dict(">f4", "(1,)"), 4), "element type '>f4' is not supported"},
        RefusedFile{"big_endian_byte", npy_file(dict(">u1", "(1,)"), 1), "element type '>u1' is not supported"},
        RefusedFile{"garbage_after_the_dict", npy_file(dict("<f4", "(1,)") + " x", 4),
                    "expected only spaces and a final newline after the dict"},
        RefusedFile{"no_final_newline", npy_raw(dict("<f4", "(1,)") + "  ", 4),
                    "expected only spaces and a final newline after the dict at byte 59, found the end of the header"},
        RefusedFile{"header_past_the_file", npy_raw(std::string(60000, ' '), 0).substr(0, 200),
                    "a header of 60000 bytes, but the file has only 190 after its prefix"},
        RefusedFile{"header_too_large", npy_file(dict("<f4", "(1,)") + std::string(70000, ' '), 4, 2),
                    "bytes, more than the 65535 accepted"},
        RefusedFile{"version_4", "\x93NUMPY\x04" + npy_file(dict("<f4", "(1,)"), 4).substr(7),
                    "format version 4.0 (1.0, 2.0 and 3.0 are supported)"},
        RefusedFile{"version_1_1", npy_file(dict("<f4", "(1,)"), 4).replace(7, 1, "\x01"), "format version 1.1"},
        RefusedFile{"no_magic", "PK\x03\x04" + npy_file(dict("<f4", "(1,)"), 4).substr(4), "\\x93NUMPY magic"},
        RefusedFile{"empty_file", "", "it has 0 bytes, fewer than the 10"},
        RefusedFile{"prefix_only", std::string("\x93NUMPY\x02\x00\x10\x00", 10), "it ends inside its header length"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Npy, ASizeClaimIsCheckedBeforeAllocating) {
  // 10^9 floats claimed, 64 bytes behind them: nothing may be allocated,
  // let alone zero-filled (which made the peak resident size grow by 4 GB).
  const fs::path path = temp_path("npy_claim.npy");
  write_file(path, npy_file(dict("<f4", "(1000000000,)"), 64));
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  refusal(path);
  getrusage(RUSAGE_SELF, &after);
  fs::remove(path);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak resident size added";
}

TEST(Npy, AFifoIsRefusedWithoutBlocking) {
  const fs::path path = temp_path("npy_fifo.npy");
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  std::promise<std::string> message;
  std::thread reader([&] {
    try {
      kiln::npy::load(path.string());
      message.set_value("accepted");
    } catch (const kiln::Error& e) {
      message.set_value(e.what());
    }
  });
  auto result = message.get_future();
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "opening a FIFO blocked";
    // A writer lets the blocked open return, so that the thread ends.
    ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));
  }
  reader.join();
  fs::remove(path);
  EXPECT_NE(result.get().find("'" + path.string() + "' is not a regular file"), std::string::npos);
}

TEST(Npy, ADirectoryOrAMissingFileIsAnIoError) {
  const fs::path dir = temp_path("npy_dir.npy");
  fs::create_directories(dir);
  EXPECT_NE(refusal(dir, kiln::ErrorCode::Io).find("is not a regular file"), std::string::npos);
  fs::remove(dir);
  EXPECT_NE(refusal(dir, kiln::ErrorCode::Io).find("cannot open"), std::string::npos);
}

}  // namespace
