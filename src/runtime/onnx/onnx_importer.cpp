#include "runtime/onnx/onnx_importer.hpp"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <xxhash.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "runtime/ir/file_hash.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::onnx_import {

using ir::DType;
using ir::ErrorKind;
using ir::fail;

namespace {

namespace fs = std::filesystem;

// Opens a file to read, refusing anything but a regular file: reading a
// FIFO would wait for a writer forever, a device could be endless.
int open_regular(const std::string& path, const std::string& what, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, "cannot open " + what + " '" + path + "': " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (S_ISDIR(st.st_mode)) fail(ErrorKind::Io, "cannot read " + what + " '" + path + "': is a directory");
    fail(ErrorKind::Io,
         "cannot read " + what + " '" + path + "': " + (S_ISREG(st.st_mode) ? std::strerror(err) : "not a regular file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_file(const std::string& path, const char* what) {
  struct stat st{};
  const int fd = open_regular(path, what, st);
  if (st.st_size > INT_MAX) {
    ::close(fd);
    fail(ErrorKind::InvalidModel,
         "'" + path + "' is larger than 2 GiB; protobuf files cannot be; store the weights as external data");
  }
  std::string bytes(size_t(st.st_size), '\0');
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += size_t(n);
  }
  ::close(fd);
  if (at != bytes.size()) fail(ErrorKind::Io, std::string("cannot read ") + what + " '" + path + "'");
  return bytes;
}

// Where an open file really is, every link resolved.
std::string real_path_of(int fd, const std::string& path) {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec) p = fs::canonical(path, ec);  // no /proc: resolved by name
  return ec ? std::string() : p.string();
}

template <typename Proto>
bool parse_proto(Proto& proto, const void* data, size_t size) {
  if (size > size_t(INT_MAX)) return false;
  google::protobuf::io::ArrayInputStream raw(data, int(size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  return proto.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

// A model file mapped read-only for as long as weights view it.
struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int fd = -1;  // kept open: own_weights checks the file was not truncated
  std::string path;
  XXH128_hash_t hash{};  // of the file alone (hash_blocks), to tell whether it changed since loading
  int hash_threads = 1;
  // The model's external data files, when their weights are views too
  // (owned, like the rest, by the model file's MappedFile).
  std::vector<std::shared_ptr<MappedFile>> external;
  ~MappedFile() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
    if (fd >= 0) ::close(fd);
  }
};

struct Span {
  const uint8_t* data;
  size_t size;
};

// Calls work(i) for every i < count on `threads` threads: the caller and up
// to threads - 1 started here (fewer if the system has none to give).
template <typename Work>
void for_each_on_threads(size_t count, int threads, const Work& work) {
  std::atomic<size_t> next{0};
  auto take = [&] {
    for (size_t i; (i = next++) < count;) work(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(size_t(std::max(threads, 1)), count); ++t) {
    try {
      helpers.emplace_back(take);
    } catch (const std::system_error&) {
      break;
    }
  }
  take();
  for (auto& h : helpers) h.join();
}

constexpr size_t kBlock = size_t(4) << 20;

// A model file's identity: XXH3-128 of each 4 MiB block, `threads` of them
// at once, then XXH3-128 of those digests and the size, so that it does not
// depend on the thread count. One thread took 16-24 ms over resnet50's
// freshly mapped 98 MB (faulting its pages in and hashing them), two took
// 10-12.
XXH128_hash_t hash_blocks(const uint8_t* data, size_t size, int threads) {
  const size_t blocks = std::max<size_t>(1, (size + kBlock - 1) / kBlock);
  std::vector<XXH128_canonical_t> digests(blocks);
  for_each_on_threads(blocks, threads, [&](size_t b) {
    XXH128_canonicalFromHash(&digests[b], XXH3_128bits(data + b * kBlock, std::min(kBlock, size - std::min(size, b * kBlock))));
  });
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, digests.data(), digests.size() * sizeof(XXH128_canonical_t));
  const uint64_t bytes = size;
  XXH3_128bits_update(state, &bytes, sizeof bytes);
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return h;
}

std::string hex_of(XXH128_hash_t hash) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, hash);
  return ir::hex_digest(c.digest, sizeof c.digest);
}

std::optional<XXH128_hash_t> hash_from_hex(const std::string& hex) {
  XXH128_canonical_t c;
  if (!ir::parse_hex_digest(hex, c.digest, sizeof c.digest)) return std::nullopt;
  return XXH128_hashFromCanonical(&c);
}

// A mapped file's hash: remembered by its identity if the caller keeps a
// memo (the cache), else read and told to the memo.
void identify(MappedFile& file, const struct stat& st, const timespec& looked_at, const ImportOptions& opts) {
  std::optional<XXH128_hash_t> known;
  if (opts.recall_file_hash) known = hash_from_hex(opts.recall_file_hash(st));
  file.hash = known ? *known : hash_blocks(file.data, file.size, opts.hash_threads);
  if (!known && opts.remember_file_hash) opts.remember_file_hash(file.path, st, looked_at, hex_of(file.hash));
  file.hash_threads = opts.hash_threads;
}

// An external data file, mapped read-only and identified.
// `inside`: the real path of the directory the file must be in (links in
// the model's directory must not lead a hostile model to other files).
std::shared_ptr<MappedFile> map_external(const std::string& path, const std::string& inside, const ImportOptions& opts,
                                         const std::string& where) {
  const timespec looked_at = ir::coarse_now();
  auto file = std::make_shared<MappedFile>();
  file->path = path;
  struct stat st{};
  file->fd = open_regular(path, where + "external data file", st);
  const std::string real = real_path_of(file->fd, path);
  if (real.empty() || real.rfind(inside == "/" ? inside : inside + "/", 0) != 0)
    fail(ErrorKind::InvalidModel, where + "external data file '" + path + "' is really '" + real +
                                      "', outside the model's directory '" + inside + "' (through a symbolic link)");
  file->size = size_t(st.st_size);
  if (file->size > 0) {
    void* map = ::mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, file->fd, 0);
    if (map == MAP_FAILED) fail(ErrorKind::Io, where + "cannot map external data file '" + path + "': " + std::strerror(errno));
    file->data = static_cast<const uint8_t*>(map);
  }
  identify(*file, st, looked_at, opts);
  return file;
}

using RawSpans = std::unordered_map<const onnx::TensorProto*, Span>;

// Walks the fields of one serialized message: each length-delimited field
// numbered `wanted` goes to `take`, every other field is appended to `rest`
// unchanged. False if the bytes are not a well-formed message.
template <typename Take>
bool split_message(const uint8_t* data, size_t size, uint32_t wanted, std::string& rest, Take&& take) {
  using google::protobuf::internal::WireFormatLite;
  if (size > size_t(INT_MAX)) return false;
  google::protobuf::io::CodedInputStream in(data, int(size));
  in.SetTotalBytesLimit(INT_MAX);
  for (;;) {
    const int start = in.CurrentPosition();
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return size_t(in.CurrentPosition()) == size;
    if (WireFormatLite::GetTagFieldNumber(tag) == int(wanted) &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return false;
      const size_t at = size_t(in.CurrentPosition());
      if (length > size - at || !take(data + at, size_t(length)) || !in.Skip(int(length))) return false;
    } else {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      rest.append(reinterpret_cast<const char*>(data) + start, size_t(in.CurrentPosition() - start));
    }
  }
}

// Parses a model whose initializers' raw_data stay in `data`: protobuf would
// copy each into a string of its own (for resnet50, 98 MB and tens of
// thousands of page faults on every load, for weights that a warm start
// never reads). False for anything unusual (no graph or two, malformed
// bytes): the caller then parses the ordinary way, which reports errors.
bool parse_model_keeping_weights(const uint8_t* data, size_t size, onnx::ModelProto& mp, RawSpans& raw) {
  constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
  std::string model_rest;
  std::vector<Span> graphs;
  if (!split_message(data, size, kModelGraph, model_rest, [&](const uint8_t* p, size_t n) {
        graphs.push_back({p, n});
        return true;
      }))
    return false;
  if (graphs.size() != 1) return false;
  std::string graph_rest;
  std::vector<std::pair<onnx::TensorProto, std::optional<Span>>> initializers;
  if (!split_message(graphs[0].data, graphs[0].size, kGraphInitializer, graph_rest, [&](const uint8_t* p, size_t n) {
        std::string tensor_rest;
        std::optional<Span> bytes;
        if (!split_message(p, n, kTensorRawData, tensor_rest, [&](const uint8_t* q, size_t m) {
              bytes = Span{q, m};  // a repeated scalar field: the last one counts
              return true;
            }))
          return false;
        initializers.emplace_back();
        initializers.back().second = bytes;
        return parse_proto(initializers.back().first, tensor_rest.data(), tensor_rest.size());
      }))
    return false;
  if (!parse_proto(mp, model_rest.data(), model_rest.size()) ||
      !parse_proto(*mp.mutable_graph(), graph_rest.data(), graph_rest.size()))
    return false;
  for (auto& [tensor, bytes] : initializers) {
    onnx::TensorProto* t = mp.mutable_graph()->add_initializer();
    t->Swap(&tensor);
    if (bytes) raw[t] = *bytes;
  }
  return true;
}

class Importer {
 public:
  Importer(std::string label, ImportOptions options) : label_(std::move(label)), options_(std::move(options)) {
    XXH3_128bits_reset(hash_.get());
  }

  // The model's identity for cache keys: the file, then every external
  // weight read, in order, hashed as they pass (no second read).
  void hash(const void* data, size_t size) { XXH3_128bits_update(hash_.get(), data, size); }
  void hash_file(const XXH128_hash_t& file) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, file);
    hash(&c, sizeof c);
  }
  XXH128_hash_t digest() const { return XXH3_128bits_digest(hash_.get()); }

  // Initializers whose raw data stays in the mapped file `file`.
  void keep_weights_in(std::shared_ptr<MappedFile> file, RawSpans raw) {
    file_ = std::move(file);
    raw_in_file_ = std::move(raw);
  }

  ir::Model import(const onnx::ModelProto& mp) {
    ir::Model m;
    m.ir_version = mp.ir_version();
    m.producer_name = mp.producer_name();
    m.producer_version = mp.producer_version();
    m.source_path = label_;
    for (const auto& o : mp.opset_import()) {
      std::string d = o.domain() == "ai.onnx" ? "" : o.domain();
      if (o.version() < 1)
        fail(ErrorKind::InvalidModel, label_ + ": opset_import gives domain '" + (d.empty() ? "ai.onnx" : d) + "' version " +
                                          std::to_string(o.version()) + "; versions start at 1");
      // A later opset may have changed what an operator means: not guessed at.
      if (d.empty() && o.version() > kMaxOpset)
        fail(ErrorKind::Unsupported, label_ + ": the model needs ai.onnx opset " + std::to_string(o.version()) +
                                         "; Kiln implements opsets 1 to " + std::to_string(kMaxOpset));
      m.opsets.push_back({d, o.version()});
      opsets_[d] = o.version();
    }
    // IR version 3+ requires opset_import; older files implicitly mean opset 1.
    if (mp.opset_import_size() == 0) {
      m.opsets.push_back({"", 1});
      opsets_[""] = 1;
    }
    if (!mp.has_graph()) fail(ErrorKind::InvalidModel, label_ + ": the model has no graph");
    m.graph = import_graph(mp.graph(), "graph");
    if (file_ && (!raw_in_file_.empty() || !file_->external.empty())) m.mapped_file = file_;
    m.content_hash = hex_of(digest());
    return m;
  }

  ir::Tensor tensor(const onnx::TensorProto& tp, const std::string& where) {
    DType dt = dtype(tp.data_type(), where + " '" + tp.name() + "'");
    ir::Dims dims;
    for (int64_t d : tp.dims()) {
      if (d < 0) fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "has negative dimension " + std::to_string(d));
      dims.push_back(d);
    }
    int64_t numel;
    try {
      numel = ir::checked_numel(dims);
    } catch (const ir::Error&) {
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " is too large");
    }
    const size_t esize = ir::dtype_size(dt);
    const uint64_t want_bytes = uint64_t(numel) * esize;

    if (tp.has_data_location() && tp.data_location() == onnx::TensorProto::EXTERNAL)
      return external_tensor(tp, dt, dims, want_bytes, where);

    auto raw_size_error = [&](size_t have) {
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " of " +
                                        ir::dtype_name(dt) + " needs " + std::to_string(want_bytes) +
                                        " bytes of raw data, the file holds " + std::to_string(have));
    };
    auto count_error = [&](size_t have) {
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " needs " +
                                        std::to_string(numel) + " elements, the file holds " + std::to_string(have));
    };
    if (auto it = raw_in_file_.find(&tp); it != raw_in_file_.end()) {
      if (it->second.size != want_bytes) raw_size_error(it->second.size);
      if (want_bytes == 0) return ir::Tensor(dt, dims);
      // Read only until own_weights() copies it out.
      return ir::Tensor::view(dt, dims, const_cast<uint8_t*>(it->second.data), file_);
    }
    if (tp.has_raw_data()) {
      if (tp.raw_data().size() != want_bytes) raw_size_error(tp.raw_data().size());
      if (want_bytes == 0) return ir::Tensor(dt, dims);
      // Every message an Importer reads belongs to that import and is thrown
      // away after it: the weights move out of it instead of being copied
      // (for resnet50, 100 MB less to copy on every load).
      std::shared_ptr<std::string> bytes(const_cast<onnx::TensorProto&>(tp).release_raw_data());
      return ir::Tensor::view(dt, dims, bytes->data(), bytes);
    }
    // Check the element count before allocating: a hostile file may claim
    // a huge shape and carry no data at all.
    int64_t have;
    switch (dt) {
      case DType::Float32: have = tp.float_data_size(); break;
      case DType::Float64: have = tp.double_data_size(); break;
      case DType::Int64: have = tp.int64_data_size(); break;
      case DType::UInt32:
      case DType::UInt64: have = tp.uint64_data_size(); break;
      default: have = tp.int32_data_size();
    }
    if (have != numel) count_error(size_t(have));
    ir::Tensor t(dt, dims);
    switch (dt) {
      case DType::Float32: std::copy(tp.float_data().begin(), tp.float_data().end(), t.data<float>()); break;
      case DType::Float64: std::copy(tp.double_data().begin(), tp.double_data().end(), t.data<double>()); break;
      case DType::Int64: std::copy(tp.int64_data().begin(), tp.int64_data().end(), t.data<int64_t>()); break;
      case DType::UInt32:
      case DType::UInt64: {
        for (int64_t i = 0; i < numel; ++i) {
          uint64_t v = tp.uint64_data(int(i));
          if (dt == DType::UInt32)
            t.data<uint32_t>()[i] = uint32_t(v);
          else
            t.data<uint64_t>()[i] = v;
        }
        break;
      }
      default: {
        // int32_data carries every type of 32 bits or less, 16-bit floats as bit patterns.
        for (int64_t i = 0; i < numel; ++i) {
          int32_t v = tp.int32_data(int(i));
          switch (dt) {
            case DType::Int32: t.data<int32_t>()[i] = v; break;
            case DType::Int16: t.data<int16_t>()[i] = int16_t(v); break;
            case DType::Int8: t.data<int8_t>()[i] = int8_t(v); break;
            case DType::UInt16: t.data<uint16_t>()[i] = uint16_t(v); break;
            case DType::UInt8: t.data<uint8_t>()[i] = uint8_t(v); break;
            case DType::Bool: t.data<bool>()[i] = v != 0; break;
            case DType::Float16: t.data<ir::Half>()[i].bits = uint16_t(v); break;
            case DType::BFloat16: t.data<ir::BFloat16>()[i].bits = uint16_t(v); break;
            default:
              fail(ErrorKind::Unsupported,
                   where_msg(where, tp.name()) + "element type " + ir::dtype_name(dt) + " is not supported");
          }
        }
      }
    }
    return t;
  }

 private:
  static std::string where_msg(const std::string& where, const std::string& name) {
    return where + (name.empty() ? "" : " '" + name + "'") + ": ";
  }

  DType dtype(int32_t code, const std::string& where) {
    if (code <= 0 || code > int32_t(DType::BFloat16))
      fail(ErrorKind::InvalidModel, label_ + ": " + where + " has unknown element type code " + std::to_string(code));
    DType dt = DType(code);
    if (!ir::dtype_supported(dt))
      fail(ErrorKind::Unsupported,
           label_ + ": " + where + " has element type " + ir::dtype_name(dt) + ", which Kiln does not support");
    return dt;
  }

  ir::Tensor external_tensor(const onnx::TensorProto& tp, DType dt, const ir::Dims& dims, uint64_t want_bytes,
                             const std::string& where) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : tp.external_data()) {
      try {
        if (kv.key() == "location")
          location = kv.value();
        else if (kv.key() == "offset")
          offset = std::stoll(kv.value());
        else if (kv.key() == "length")
          length = std::stoll(kv.value());
      } catch (const std::exception&) {
        fail(ErrorKind::InvalidModel,
             where_msg(where, tp.name()) + "external data field '" + kv.key() + "' is not a number: '" + kv.value() + "'");
      }
    }
    std::string dir = options_.external_data_dir;
    if (dir.empty())
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "weights are in an external file '" + location +
                                        "' but the model was loaded from memory without a directory for external data");
    if (location.empty()) fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data has no location");
    fs::path rel(location);
    // Keep external data inside the model's directory: a hostile file must not read /etc/passwd.
    if (rel.is_absolute() || location.find("..") != std::string::npos)
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data location '" + location +
                                        "' must be a relative path inside the model's directory");
    const std::string full = (fs::path(dir) / rel).string();
    std::shared_ptr<MappedFile>& file = external_[full];
    if (!file) {
      std::error_code ec;
      const std::string inside = fs::canonical(dir, ec).string();
      if (ec)
        fail(ErrorKind::Io,
             where_msg(where, tp.name()) + "cannot open the external data directory '" + dir + "': " + ec.message());
      file = map_external(full, inside, options_, where_msg(where, tp.name()));
      if (file_) file_->external.push_back(file);
    }
    const uint64_t file_size = file->size;
    if (offset < 0 || uint64_t(offset) > file_size)
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data offset " + std::to_string(offset) +
                                        " is outside '" + full + "' (" + std::to_string(file_size) + " bytes)");
    if (length >= 0 && uint64_t(length) != want_bytes)
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data length " + std::to_string(length) +
                                        " does not match the " + std::to_string(want_bytes) + " bytes its shape needs");
    if (file_size - uint64_t(offset) < want_bytes)
      fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data file '" + full + "' is too short: needs " +
                                        std::to_string(want_bytes) + " bytes at offset " + std::to_string(offset));
    // The file's identity and where in it: each file is read once however
    // many tensors it holds, and not at all when its hash is remembered.
    hash_file(file->hash);
    const uint64_t span[2] = {uint64_t(offset), want_bytes};
    hash(span, sizeof span);
    if (want_bytes == 0) return ir::Tensor(dt, dims);
    const uint8_t* at = file->data + offset;
    // Read only until own_weights() copies it out.
    if (file_) return ir::Tensor::view(dt, dims, const_cast<uint8_t*>(at), file_);
    ir::Tensor t = ir::Tensor::uninitialized(dt, dims);
    std::memcpy(t.raw(), at, want_bytes);
    return t;
  }

  ir::ValueInfo value_info(const onnx::ValueInfoProto& vp, const std::string& where) {
    ir::ValueInfo v;
    v.name = vp.name();
    if (!vp.has_type()) return v;  // type unknown: allowed for intermediates and some outputs
    const auto& type = vp.type();
    if (type.has_sequence_type() || type.has_optional_type() || type.has_map_type() || type.has_sparse_tensor_type())
      fail(ErrorKind::Unsupported, label_ + ": " + where + " '" + vp.name() + "' is " +
                                       (type.has_sequence_type()   ? "a sequence"
                                        : type.has_optional_type() ? "an optional"
                                        : type.has_map_type()      ? "a map"
                                                                   : "a sparse tensor") +
                                       "; Kiln supports dense tensors only");
    if (!type.has_tensor_type()) return v;
    const auto& tt = type.tensor_type();
    if (tt.elem_type() != 0) v.dtype = dtype(tt.elem_type(), where + " '" + vp.name() + "'");
    if (tt.has_shape()) {
      v.shape = ir::Shape{};
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          if (d.dim_value() < 0)
            fail(ErrorKind::InvalidModel,
                 label_ + ": " + where + " '" + vp.name() + "' has negative dimension " + std::to_string(d.dim_value()));
          v.shape.dims.push_back(ir::Dim::known(d.dim_value()));
        } else if (d.has_dim_param() && !d.dim_param().empty()) {
          v.shape.dims.push_back(ir::Dim::named(d.dim_param()));
        } else {
          v.shape.dims.push_back(ir::Dim::unknown());
        }
      }
    }
    return v;
  }

  ir::Attribute attribute(const onnx::AttributeProto& ap, const ir::Node& node) {
    ir::Attribute a;
    using K = ir::Attribute::Kind;
    const std::string where = "attribute '" + ap.name() + "' of " + node.describe();
    switch (ap.type()) {
      case onnx::AttributeProto::FLOAT:
        a.kind = K::Float;
        a.f = ap.f();
        break;
      case onnx::AttributeProto::INT:
        a.kind = K::Int;
        a.i = ap.i();
        break;
      case onnx::AttributeProto::STRING:
        a.kind = K::String;
        a.s = ap.s();
        break;
      case onnx::AttributeProto::TENSOR:
        a.kind = K::Tensor;
        a.t = tensor(ap.t(), where);
        break;
      case onnx::AttributeProto::GRAPH:
        a.kind = K::Graph;
        a.g = import_graph(ap.g(), where);
        break;
      case onnx::AttributeProto::FLOATS:
        a.kind = K::Floats;
        a.floats.assign(ap.floats().begin(), ap.floats().end());
        break;
      case onnx::AttributeProto::INTS:
        a.kind = K::Ints;
        a.ints.assign(ap.ints().begin(), ap.ints().end());
        break;
      case onnx::AttributeProto::STRINGS:
        a.kind = K::Strings;
        a.strings.assign(ap.strings().begin(), ap.strings().end());
        break;
      case onnx::AttributeProto::TENSORS:
        a.kind = K::Tensors;
        for (const auto& t : ap.tensors()) a.tensors.push_back(tensor(t, where));
        break;
      case onnx::AttributeProto::GRAPHS:
        a.kind = K::Graphs;
        for (const auto& g : ap.graphs()) a.graphs.push_back(import_graph(g, where));
        break;
      case onnx::AttributeProto::UNDEFINED: {
        // Files written before IR version 2 carry no type: infer it from the populated field.
        if (ap.has_f()) {
          a.kind = K::Float;
          a.f = ap.f();
        } else if (ap.has_i()) {
          a.kind = K::Int;
          a.i = ap.i();
        } else if (ap.has_s()) {
          a.kind = K::String;
          a.s = ap.s();
        } else if (ap.has_t()) {
          a.kind = K::Tensor;
          a.t = tensor(ap.t(), where);
        } else if (ap.has_g()) {
          a.kind = K::Graph;
          a.g = import_graph(ap.g(), where);
        } else if (ap.floats_size()) {
          a.kind = K::Floats;
          a.floats.assign(ap.floats().begin(), ap.floats().end());
        } else if (ap.ints_size()) {
          a.kind = K::Ints;
          a.ints.assign(ap.ints().begin(), ap.ints().end());
        } else if (ap.strings_size()) {
          a.kind = K::Strings;
          a.strings.assign(ap.strings().begin(), ap.strings().end());
        } else
          fail(ErrorKind::InvalidModel, label_ + ": " + where + " has no type and no value");
        break;
      }
      default:
        fail(ErrorKind::Unsupported,
             label_ + ": " + where + " has attribute type " + std::to_string(int(ap.type())) + ", which Kiln does not support");
    }
    return a;
  }

  // The value of a Constant node; sparse and string constants are unsupported.
  ir::Tensor constant_value(const ir::Node& n) {
    if (n.attributes.size() != 1)
      fail(ErrorKind::InvalidModel, label_ + ": " + n.describe() + " must have exactly one value attribute");
    const auto& [key, a] = *n.attributes.begin();
    if (key == "value") return a.t;
    if (key == "value_float") return ir::Tensor::scalar<float>(a.f);
    if (key == "value_floats") return ir::Tensor::from_vector<float>({int64_t(a.floats.size())}, a.floats);
    if (key == "value_int") return ir::Tensor::scalar<int64_t>(a.i);
    if (key == "value_ints") return ir::Tensor::from_vector<int64_t>({int64_t(a.ints.size())}, a.ints);
    fail(ErrorKind::Unsupported,
         label_ + ": " + n.describe() + ": constant attribute '" + key + "' is not supported (dense numeric tensors only)");
  }

  std::shared_ptr<ir::Graph> import_graph(const onnx::GraphProto& gp, const std::string& where) {
    if (++depth_ > 64) fail(ErrorKind::InvalidModel, label_ + ": subgraphs are nested more than 64 deep");
    auto g = std::make_shared<ir::Graph>();
    g->name = gp.name();
    const std::string gwhere = gp.name().empty() ? where : "graph '" + gp.name() + "'";

    for (const auto& t : gp.initializer()) {
      if (t.name().empty()) fail(ErrorKind::InvalidModel, label_ + ": " + gwhere + " has an initializer without a name");
      g->initializers[t.name()] = tensor(t, label_ + ": initializer");
    }
    if (gp.sparse_initializer_size())
      fail(ErrorKind::Unsupported, label_ + ": " + gwhere + " has sparse initializers, which Kiln does not support");

    std::set<std::string> defined;
    for (const auto& [name, t] : g->initializers) defined.insert(name);
    for (const auto& in : gp.input()) {
      if (in.name().empty()) fail(ErrorKind::InvalidModel, label_ + ": " + gwhere + " has an input without a name");
      g->inputs.push_back(value_info(in, "input"));
      defined.insert(in.name());
    }
    for (const auto& out : gp.output()) g->outputs.push_back(value_info(out, "output"));
    for (const auto& vi : gp.value_info()) {
      try {
        g->value_info[vi.name()] = value_info(vi, "value");
      } catch (const ir::Error&) {
        // Annotations of intermediate values are hints only; a sequence-typed
        // intermediate fails later at the node that produces it.
      }
    }

    int index = 0;
    for (const auto& np : gp.node()) {
      ir::Node n;
      n.op_type = np.op_type();
      n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
      n.name = np.name().empty() ? n.op_type + "_" + std::to_string(index) : np.name();
      ++index;
      auto os = opsets_.find(n.domain);
      if (os == opsets_.end())
        fail(ErrorKind::InvalidModel,
             label_ + ": " + n.describe() + " uses domain '" + n.domain + "', which the model does not import");
      n.opset = int(std::min<int64_t>(os->second, INT_MAX));
      if (n.op_type.empty())
        fail(ErrorKind::InvalidModel, label_ + ": node " + std::to_string(index - 1) + " of " + gwhere + " has no op_type");
      n.inputs.assign(np.input().begin(), np.input().end());
      n.outputs.assign(np.output().begin(), np.output().end());
      for (const auto& ap : np.attribute()) {
        if (ap.name().empty()) fail(ErrorKind::InvalidModel, label_ + ": " + n.describe() + " has an attribute without a name");
        if (!ap.ref_attr_name().empty())
          fail(ErrorKind::Unsupported,
               label_ + ": " + n.describe() + " refers to a function attribute; functions are not supported");
        n.attributes[ap.name()] = attribute(ap, n);
      }
      for (const auto& o : n.outputs) {
        if (o.empty()) continue;
        if (!defined.insert(o).second && !g->initializers.count(o))
          fail(ErrorKind::InvalidModel, label_ + ": " + n.describe() + " redefines value '" + o + "'");
      }
      if (n.domain.empty() && n.op_type == "Constant" && n.outputs.size() == 1 && !n.outputs[0].empty()) {
        g->initializers[n.outputs[0]] = constant_value(n);
        continue;
      }
      g->nodes.push_back(std::move(n));
    }
    --depth_;
    return g;
  }

  std::string label_;
  ImportOptions options_;
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash_{XXH3_createState(), XXH3_freeState};
  std::map<std::string, int64_t> opsets_;
  int depth_ = 0;
  std::shared_ptr<MappedFile> file_;
  RawSpans raw_in_file_;
  std::map<std::string, std::shared_ptr<MappedFile>> external_;  // by path
};

}  // namespace

ir::Model import_model_bytes(const void* data, size_t size, const std::string& label, const ImportOptions& options) {
  onnx::ModelProto mp;
  if (size == 0) fail(ErrorKind::InvalidModel, label + ": the file is empty, not an ONNX model");
  if (!parse_proto(mp, data, size))
    fail(ErrorKind::InvalidModel,
         label + ": not a valid ONNX model (protobuf parse failed: the file is truncated, corrupt or not ONNX)");
  Importer importer(label, options);
  importer.hash_file(hash_blocks(static_cast<const uint8_t*>(data), size, options.hash_threads));
  return importer.import(mp);
}

ir::Model import_model_file(const std::string& path, const ImportOptions& options) {
  ImportOptions opts = options;
  if (opts.external_data_dir.empty()) {
    fs::path parent = fs::path(path).parent_path();
    opts.external_data_dir = parent.empty() ? "." : parent.string();
  }
  const timespec looked_at = ir::coarse_now();  // before the file is examined (see ImportOptions::remember_file_hash)
  auto file = std::make_shared<MappedFile>();
  file->path = path;
  struct stat st{};
  file->fd = open_regular(path, "model", st);
  if (st.st_size == 0) fail(ErrorKind::InvalidModel, path + ": the file is empty, not an ONNX model");
  if (uint64_t(st.st_size) > uint64_t(INT_MAX))
    fail(ErrorKind::InvalidModel,
         "'" + path + "' is larger than 2 GiB; protobuf files cannot be; store the weights as external data");
  file->size = size_t(st.st_size);
  void* map = ::mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, file->fd, 0);
  if (map == MAP_FAILED) fail(ErrorKind::Io, "cannot map model '" + path + "': " + std::strerror(errno));
  file->data = static_cast<const uint8_t*>(map);

  if (!options.keep_weights_in_file) return import_model_bytes(file->data, file->size, path, opts);
  onnx::ModelProto mp;
  RawSpans raw;
  if (!parse_model_keeping_weights(file->data, file->size, mp, raw))
    return import_model_bytes(file->data, file->size, path, opts);
  Importer importer(path, opts);
  identify(*file, st, looked_at, opts);
  importer.hash_file(file->hash);
  importer.keep_weights_in(file, std::move(raw));
  return importer.import(mp);
}

void own_weights(ir::Model& model) {
  if (!model.mapped_file) return;
  const auto& file = *std::static_pointer_cast<const MappedFile>(model.mapped_file);
  // The weights were never read: make sure they are the bytes the cache key
  // was computed from. A file rewritten in place (rather than replaced by a
  // rename) is an error, not a silently different model.
  auto check = [](const MappedFile& f, const std::string& what) {
    struct stat st{};
    if (::fstat(f.fd, &st) != 0 || uint64_t(st.st_size) != f.size ||
        !XXH128_isEqual(hash_blocks(f.data, f.size, f.hash_threads), f.hash))
      fail(ErrorKind::Io, what + " '" + f.path +
                              "' was changed on disk after the model was loaded; load it again (replace model files by renaming "
                              "a new file over them, not by rewriting them in place)");
  };
  check(file, "model");
  for (const auto& e : file.external) check(*e, "external data file");
  // One block for all of them, in huge pages, copied in pieces on the
  // threads that hashed the file: resnet50's 97 MB took 70-90 ms as 160
  // tensors allocated one by one, 36-45 ms as one block on one thread and
  // 29-42 on two.
  struct Piece {
    const char* from;
    char* to;
    size_t bytes;
  };
  auto padded = [](const ir::Tensor& t) { return (t.nbytes() + 63) / 64 * 64; };  // each 64-byte aligned
  std::vector<Piece> pieces;
  size_t total = 0;
  for (auto& [name, t] : model.graph->initializers)
    if (t.owner() == model.mapped_file) total += padded(t);
  std::shared_ptr<void> block(ir::allocate_buffer(total), &std::free);
  if (!block)
    fail(ErrorKind::Internal, "out of memory copying the weights of '" + file.path + "' (" + std::to_string(total) + " bytes)");
  char* to = static_cast<char*>(block.get());
  for (auto& [name, t] : model.graph->initializers) {
    if (t.owner() != model.mapped_file) continue;
    for (size_t at = 0; at < t.nbytes(); at += kBlock)
      pieces.push_back({static_cast<const char*>(t.raw()) + at, to + at, std::min(kBlock, t.nbytes() - at)});
    t = ir::Tensor::view(t.dtype(), t.dims(), to, block);
    to += padded(t);
  }
  for_each_on_threads(pieces.size(), file.hash_threads,
                      [&](size_t i) { std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes); });
  model.mapped_file.reset();
}

ir::Tensor import_tensor_bytes(const void* data, size_t size, const std::string& label) {
  onnx::TensorProto tp;
  if (!parse_proto(tp, data, size)) fail(ErrorKind::InvalidModel, label + ": not a valid ONNX TensorProto");
  if (tp.data_type() == int32_t(DType::String)) fail(ErrorKind::Unsupported, label + ": string tensors are not supported");
  return Importer(label, {}).tensor(tp, label + ": tensor");
}

ir::Tensor import_tensor_file(const std::string& path) {
  std::string bytes = read_file(path, "tensor");
  return import_tensor_bytes(bytes.data(), bytes.size(), path);
}

}  // namespace kiln::onnx_import
