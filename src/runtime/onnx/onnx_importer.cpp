#include "runtime/onnx/onnx_importer.hpp"

#include <onnx/onnx_pb.h>
// After onnx_pb.h, which defines the ONNX_API it uses.
#include <onnx/onnx-data.pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "runtime/ir/file_hash.hpp"
#include "runtime/ir/huge_pages.hpp"
#include "runtime/onnx/model_files.hpp"
#include "runtime/onnx/tensor_proto.hpp"

namespace kiln::onnx_import {

using ir::DType;
using ir::ErrorKind;
using ir::fail;

namespace {

namespace fs = std::filesystem;

template <typename Proto>
bool parse_proto(Proto& proto, const void* data, size_t size) {
  if (size > size_t(INT_MAX)) return false;
  google::protobuf::io::ArrayInputStream raw(data, int(size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  return proto.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

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
  Importer(std::string label, ImportOptions options)
      : label_(std::move(label)), options_(std::move(options)), reader_(label_, options_, hash_) {}

  void hash_file(const XXH128_hash_t& file) { hash_.hash_file(file); }

  // Initializers whose raw data stays in the mapped file `file`.
  void keep_weights_in(std::shared_ptr<MappedFile> file, RawSpans raw) {
    reader_.keep_weights_in(std::move(file), std::move(raw));
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
    m.mapped_file = reader_.viewed_file();
    m.content_hash = hex_of(hash_.digest());
    return m;
  }

 private:
  ir::ValueInfo value_info(const onnx::ValueInfoProto& vp, const std::string& where) {
    if (!vp.has_type()) {  // type unknown: allowed for intermediates and some outputs
      ir::ValueInfo v;
      v.name = vp.name();
      return v;
    }
    ir::ValueInfo v = type_info(vp.type(), where + " '" + vp.name() + "'");
    v.name = vp.name();
    return v;
  }

  ir::ValueInfo type_info(const onnx::TypeProto& proto, const std::string& what) {
    ir::ValueInfo v;
    const onnx::TypeProto* type = &proto;
    // A sequence of tensors, an optional of a tensor or of such a sequence:
    // the kinds of value the operators make. Nothing nests deeper.
    if (type->has_optional_type()) {
      v.kind = ir::ValueKind::Optional;
      type = &type->optional_type().elem_type();
      if (type->has_sequence_type()) v.element_kind = ir::ValueKind::Sequence;
    } else if (type->has_sequence_type()) {
      v.kind = ir::ValueKind::Sequence;
    }
    if (type->has_sequence_type()) type = &type->sequence_type().elem_type();
    const char* unsupported = type->has_sequence_type()        ? "a sequence of sequences"
                              : type->has_optional_type()      ? "an optional inside a sequence or an optional"
                              : type->has_map_type()           ? "a map"
                              : type->has_sparse_tensor_type() ? "a sparse tensor"
                                                               : nullptr;
    if (unsupported)
      fail(ErrorKind::Unsupported,
           label_ + ": " + what + " is " + unsupported + "; Kiln supports tensors, sequences of tensors and optionals of those");
    if (!type->has_tensor_type()) return v;
    const auto& tt = type->tensor_type();
    if (tt.elem_type() != 0) v.dtype = reader_.dtype(tt.elem_type(), what);
    if (tt.has_shape()) {
      v.shape = ir::Shape{};
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          if (d.dim_value() < 0)
            fail(ErrorKind::InvalidModel, label_ + ": " + what + " has negative dimension " + std::to_string(d.dim_value()));
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
        a.t = reader_.tensor(ap.t(), where);
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
        for (const auto& t : ap.tensors()) a.tensors.push_back(reader_.tensor(t, where));
        break;
      case onnx::AttributeProto::GRAPHS:
        a.kind = K::Graphs;
        for (const auto& g : ap.graphs()) a.graphs.push_back(import_graph(g, where));
        break;
      case onnx::AttributeProto::TYPE_PROTO:
        a.kind = K::Type;
        a.type = type_info(ap.tp(), where);
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
          a.t = reader_.tensor(ap.t(), where);
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

  // The value of a Constant node; sparse constants are unsupported.
  ir::Tensor constant_value(const ir::Node& n) {
    if (n.attributes.size() != 1)
      fail(ErrorKind::InvalidModel, label_ + ": " + n.describe() + " must have exactly one value attribute");
    const auto& [key, a] = *n.attributes.begin();
    if (key == "value") return a.t;
    if (key == "value_float") return ir::Tensor::scalar<float>(a.f);
    if (key == "value_floats") return ir::Tensor::from_vector<float>({int64_t(a.floats.size())}, a.floats);
    if (key == "value_int") return ir::Tensor::scalar<int64_t>(a.i);
    if (key == "value_ints") return ir::Tensor::from_vector<int64_t>({int64_t(a.ints.size())}, a.ints);
    if (key == "value_string") return ir::Tensor::scalar<std::string>(a.s);
    if (key == "value_strings") return ir::Tensor::from_vector<std::string>({int64_t(a.strings.size())}, a.strings);
    fail(ErrorKind::Unsupported,
         label_ + ": " + n.describe() + ": constant attribute '" + key + "' is not supported (dense tensors only)");
  }

  std::shared_ptr<ir::Graph> import_graph(const onnx::GraphProto& gp, const std::string& where) {
    if (++depth_ > 64) fail(ErrorKind::InvalidModel, label_ + ": subgraphs are nested more than 64 deep");
    auto g = std::make_shared<ir::Graph>();
    g->name = gp.name();
    const std::string gwhere = gp.name().empty() ? where : "graph '" + gp.name() + "'";

    for (const auto& t : gp.initializer()) {
      if (t.name().empty()) fail(ErrorKind::InvalidModel, label_ + ": " + gwhere + " has an initializer without a name");
      g->initializers[t.name()] = reader_.tensor(t, label_ + ": initializer");
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
        // Annotations of intermediate values are hints only; a map-typed
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
  ContentHash hash_;
  TensorReader reader_;
  std::map<std::string, int64_t> opsets_;
  int depth_ = 0;
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
  const ImportOptions none;
  ContentHash unused;
  return TensorReader(label, none, unused).tensor(tp, label + ": tensor");
}

ir::Tensor import_tensor_file(const std::string& path) {
  std::string bytes = read_file(path, "tensor");
  return import_tensor_bytes(bytes.data(), bytes.size(), path);
}

namespace {

// The element types of SequenceProto and OptionalProto (onnx-data.proto).
enum ElemType : int32_t { kTensor = 1, kSparseTensor = 2, kSequence = 3, kMap = 4, kOptional = 5 };

void expect_elem_type(int32_t got, int32_t want, const std::string& where) {
  if (got == want) return;
  static const char* const names[] = {"undefined", "tensor", "sparse tensor", "sequence", "map", "optional"};
  const std::string name = got >= 0 && got <= kOptional ? names[got] : "unknown (" + std::to_string(got) + ")";
  fail(got == kSparseTensor || got == kMap ? ErrorKind::Unsupported : ErrorKind::InvalidModel,
       where + " holds elements of type " + name + ", expected " + names[want]);
}

ir::Value sequence_value(const onnx::SequenceProto& sp, TensorReader& reader, const std::string& where) {
  // An empty sequence may leave its element type unset.
  if (sp.elem_type() != 0 || sp.tensor_values_size()) expect_elem_type(sp.elem_type(), kTensor, where);
  if (sp.sequence_values_size() || sp.map_values_size() || sp.optional_values_size() || sp.sparse_tensor_values_size())
    fail(ErrorKind::InvalidModel, where + ": a sequence of tensors holds other values too");
  std::vector<ir::Tensor> tensors;
  for (const auto& tp : sp.tensor_values()) {
    const std::string what = where + " element " + std::to_string(tensors.size());
    tensors.push_back(reader.tensor(tp, what));
    if (tensors.back().dtype() != tensors[0].dtype())
      fail(ErrorKind::InvalidModel, what + " is " + ir::dtype_name(tensors.back().dtype()) + ", the sequence's first is " +
                                        ir::dtype_name(tensors[0].dtype()));
  }
  return ir::Value::of_sequence(std::move(tensors));
}

}  // namespace

ir::Value import_value_bytes(const void* data, size_t size, const ir::ValueInfo& as, const std::string& label) {
  if (as.kind == ir::ValueKind::Tensor) return import_tensor_bytes(data, size, label);
  const ImportOptions none;
  ContentHash unused;
  TensorReader reader(label, none, unused);
  if (as.kind == ir::ValueKind::Sequence) {
    onnx::SequenceProto sp;
    if (!parse_proto(sp, data, size)) fail(ErrorKind::InvalidModel, label + ": not a valid ONNX SequenceProto");
    return sequence_value(sp, reader, label + ": sequence");
  }
  onnx::OptionalProto op;
  if (!parse_proto(op, data, size)) fail(ErrorKind::InvalidModel, label + ": not a valid ONNX OptionalProto");
  const std::string where = label + ": optional";
  const bool sequence = as.element_kind == ir::ValueKind::Sequence;
  if (op.elem_type() != 0) expect_elem_type(op.elem_type(), sequence ? kSequence : kTensor, where);
  if (sequence ? op.has_tensor_value() : op.has_sequence_value())
    fail(ErrorKind::InvalidModel, where + " holds a value of the other kind than its element type");
  if (op.has_tensor_value()) return ir::Value::optional(reader.tensor(op.tensor_value(), where));
  if (op.has_sequence_value()) return ir::Value::optional(sequence_value(op.sequence_value(), reader, where));
  if (op.has_sparse_tensor_value() || op.has_map_value() || op.has_optional_value())
    fail(ErrorKind::Unsupported, where + " holds a sparse tensor, a map or an optional; Kiln supports tensors and sequences");
  return ir::Value::empty_optional(as.element_kind);
}

ir::Value import_value_file(const std::string& path, const ir::ValueInfo& as) {
  std::string bytes = read_file(path, ir::value_kind_name(as.kind));
  return import_value_bytes(bytes.data(), bytes.size(), as, path);
}

}  // namespace kiln::onnx_import
