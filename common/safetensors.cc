#include "common/safetensors.h"

#include <google/protobuf/struct.pb.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/proto_io.h"

namespace pp::common {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

constexpr char kMetadataKey[] = "__metadata__";
// Doubles hold every integer up to 2^53 exactly; JSON numbers above it cannot be trusted as sizes.
constexpr double kMaxExactInteger = 9007199254740992.0;

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

size_t ElementBytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

const char* DTypeName(DType dtype) { return dtype == DType::kF32 ? "F32" : "BF16"; }

absl::Status Invalid(absl::string_view origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

absl::StatusOr<uint64_t> ToInteger(const Value& value, absl::string_view what) {
  if (value.kind_case() != Value::kNumberValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a number"));
  }
  double x = value.number_value();
  if (!(x >= 0) || x > kMaxExactInteger || std::floor(x) != x) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a non-negative integer: ", x));
  }
  return static_cast<uint64_t>(x);
}

absl::StatusOr<DType> ParseDType(const Value& value) {
  if (value.kind_case() != Value::kStringValue) {
    return absl::InvalidArgumentError("dtype is not a string");
  }
  const std::string& name = value.string_value();
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype \"", name, "\" (supported: F32, BF16)"));
}

// One header entry; errors do not yet name the tensor (the caller adds it).
absl::StatusOr<Entry> ParseEntry(const std::string& name, const Value& value) {
  if (value.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("entry is not a JSON object");
  }
  const auto& fields = value.struct_value().fields();
  for (const auto& [key, unused] : fields) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(absl::StrCat("unexpected key \"", key, "\""));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!fields.contains(key)) return absl::InvalidArgumentError(absl::StrCat("missing ", key));
  }
  Entry entry;
  entry.name = name;
  absl::StatusOr<DType> dtype = ParseDType(fields.at("dtype"));
  if (!dtype.ok()) return dtype.status();
  entry.dtype = *dtype;

  const Value& shape = fields.at("shape");
  if (shape.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError("shape is not a list");
  }
  for (const Value& dim : shape.list_value().values()) {
    absl::StatusOr<uint64_t> d = ToInteger(dim, "shape dimension");
    if (!d.ok()) return d.status();
    entry.shape.push_back(static_cast<int64_t>(*d));
  }

  const Value& offsets = fields.at("data_offsets");
  if (offsets.kind_case() != Value::kListValue || offsets.list_value().values_size() != 2) {
    return absl::InvalidArgumentError("data_offsets is not a list [begin, end]");
  }
  absl::StatusOr<uint64_t> begin = ToInteger(offsets.list_value().values(0), "data_offsets begin");
  if (!begin.ok()) return begin.status();
  absl::StatusOr<uint64_t> end = ToInteger(offsets.list_value().values(1), "data_offsets end");
  if (!end.ok()) return end.status();
  if (*begin > *end) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_offsets [", *begin, ", ", *end, "] end before begin"));
  }
  entry.begin = *begin;
  entry.end = *end;

  absl::StatusOr<int64_t> count = NumElements(entry.shape);
  if (!count.ok()) return count.status();
  // count < 2^63 and element size <= 4, so the product fits in uint64.
  uint64_t need = static_cast<uint64_t>(*count) * ElementBytes(entry.dtype);
  if (need != entry.end - entry.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(entry.shape, ","), "] of ", DTypeName(entry.dtype),
                     " needs ", need, " bytes but data_offsets span ", entry.end - entry.begin));
  }
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Value& value) {
  if (value.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("__metadata__ is not a JSON object");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.struct_value().fields()) {
    if (v.kind_case() != Value::kStringValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("__metadata__ value of \"", key, "\" is not a string"));
    }
    metadata[key] = v.string_value();
  }
  return metadata;
}

float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // stay a (quiet) NaN
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void Decode(const char* src, DType dtype, std::vector<float>* out) {
  if (out->empty()) return;  // memcpy must not see the null data() of an empty vector
  if (dtype == DType::kF32) {
    std::memcpy(out->data(), src, out->size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < out->size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    (*out)[i] = Bf16ToFloat(bits);
  }
}

void Encode(const std::vector<float>& values, DType dtype, std::string* out) {
  if (dtype == DType::kF32) {
    out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    return;
  }
  for (float x : values) {
    uint16_t bits = FloatToBf16(x);
    out->append(reinterpret_cast<const char*>(&bits), 2);
  }
}

}  // namespace

absl::StatusOr<int64_t> NumElements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", d));
    if (d != 0 && count > (int64_t{1} << 60) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] is too large"));
    }
    count *= d;
  }
  return count;
}

namespace {

// The file's two parts: the JSON header and the data buffer after it.
struct Parts {
  absl::string_view header;
  absl::string_view buffer;
};

absl::StatusOr<Parts> SplitFile(absl::string_view bytes, absl::string_view origin) {
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(origin, ": truncated: ", bytes.size(),
                                            " bytes, need 8 for the header length"));
  }
  uint64_t header_length;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > kMaxSafetensorsHeaderBytes) {
    return Invalid(origin, absl::StrCat("header length ", header_length, " exceeds the limit of ",
                                        kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_length > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(origin, ": truncated: header length ", header_length,
                                            " but only ", bytes.size() - 8, " bytes follow"));
  }
  Parts parts{bytes.substr(8, header_length), bytes.substr(8 + header_length)};
  if (parts.header.empty() || parts.header.front() != '{') {
    return Invalid(origin, "header does not start with '{'");
  }
  return parts;
}

// The header's metadata (into `file`) and tensor entries, each inside the buffer.
absl::StatusOr<std::vector<Entry>> ParseHeader(const Parts& parts, absl::string_view origin,
                                               SafetensorsFile& file) {
  Struct root;
  // The parser's message quotes the bytes around the error: a job's reason must not carry them.
  if (absl::Status parsed = JsonToMessage(parts.header, &root); !parsed.ok()) {
    const bool twice = absl::StrContains(parsed.message(), "Repeated map key");
    return Invalid(origin, twice ? "bad JSON header: a name appears twice" : "bad JSON header");
  }
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.fields()) {
    if (name == kMetadataKey) {
      absl::StatusOr<std::map<std::string, std::string>> metadata = ParseMetadata(value);
      if (!metadata.ok()) return Invalid(origin, metadata.status().message());
      file.metadata = *std::move(metadata);
      continue;
    }
    if (name.empty()) return Invalid(origin, "empty tensor name");
    absl::StatusOr<Entry> entry = ParseEntry(name, value);
    if (!entry.ok()) {
      return Invalid(origin, absl::StrCat("tensor \"", name, "\": ", entry.status().message()));
    }
    if (entry->end > parts.buffer.size()) {
      return Invalid(origin, absl::StrCat("tensor \"", name, "\": data_offsets end ", entry->end,
                                          " is out of bounds (data buffer has ",
                                          parts.buffer.size(), " bytes)"));
    }
    entries.push_back(*std::move(entry));
  }
  return entries;
}

// Sorts the entries by offset; they must tile the buffer: each begins where the previous ended.
absl::Status CheckTiling(std::vector<Entry>& entries, size_t buffer_size,
                         absl::string_view origin) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t position = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin < position) {
      return Invalid(origin, absl::StrCat("tensor \"", entry.name, "\" [", entry.begin, ", ",
                                          entry.end, ") overlaps tensor \"", previous->name, "\" [",
                                          previous->begin, ", ", previous->end, ")"));
    }
    if (entry.begin > position) {
      return Invalid(origin, absl::StrCat("tensor \"", entry.name, "\" begins at ", entry.begin,
                                          " leaving a gap after byte ", position,
                                          " (offsets must be contiguous)"));
    }
    position = entry.end;
    previous = &entry;
  }
  if (position != buffer_size) {
    return Invalid(origin, absl::StrCat("data buffer has ", buffer_size,
                                        " bytes but the tensors cover ", position));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes,
                                                 absl::string_view origin) {
  absl::StatusOr<Parts> parts = SplitFile(bytes, origin);
  if (!parts.ok()) return parts.status();
  SafetensorsFile file;
  absl::StatusOr<std::vector<Entry>> entries = ParseHeader(*parts, origin, file);
  if (!entries.ok()) return entries.status();
  if (absl::Status s = CheckTiling(*entries, parts->buffer.size(), origin); !s.ok()) return s;
  file.tensors.reserve(entries->size());
  for (Entry& entry : *entries) {
    Tensor tensor;
    tensor.name = std::move(entry.name);
    tensor.shape = std::move(entry.shape);
    tensor.data.resize((entry.end - entry.begin) / ElementBytes(entry.dtype));
    Decode(parts->buffer.data() + entry.begin, entry.dtype, &tensor.data);
    file.tensors.push_back(std::move(tensor));
  }
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSafetensors(*bytes, path);
}

absl::StatusOr<std::string> SerializeSafetensors(const std::vector<Tensor>& tensors,
                                                 const std::map<std::string, std::string>& metadata,
                                                 DType dtype) {
  Struct root;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const Tensor& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write a tensor named \"", tensor.name, "\""));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name \"", tensor.name, "\""));
    }
    absl::StatusOr<int64_t> count = NumElements(tensor.shape);
    if (!count.ok() || static_cast<size_t>(*count) != tensor.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", tensor.name, "\": shape [", absl::StrJoin(tensor.shape, ","),
                       "] does not ", "match its ", tensor.data.size(), " values"));
    }
    Struct entry;
    (*entry.mutable_fields())["dtype"].set_string_value(DTypeName(dtype));
    ListValue* shape = (*entry.mutable_fields())["shape"].mutable_list_value();
    for (int64_t d : tensor.shape) shape->add_values()->set_number_value(static_cast<double>(d));
    ListValue* offsets = (*entry.mutable_fields())["data_offsets"].mutable_list_value();
    uint64_t end = offset + tensor.data.size() * ElementBytes(dtype);
    offsets->add_values()->set_number_value(static_cast<double>(offset));
    offsets->add_values()->set_number_value(static_cast<double>(end));
    offset = end;
    *(*root.mutable_fields())[tensor.name].mutable_struct_value() = std::move(entry);
  }
  if (!metadata.empty()) {
    Struct* meta = (*root.mutable_fields())[kMetadataKey].mutable_struct_value();
    for (const auto& [key, value] : metadata)
      (*meta->mutable_fields())[key].set_string_value(value);
  }
  absl::StatusOr<std::string> json = MessageToJson(root);
  if (!json.ok()) return json.status();
  std::string header = *std::move(json);
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned

  std::string out;
  out.reserve(8 + header.size() + offset);
  uint64_t header_length = header.size();
  out.append(reinterpret_cast<const char*>(&header_length), 8);
  out.append(header);
  for (const Tensor& tensor : tensors) Encode(tensor.data, dtype, &out);
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata, DType dtype) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata, dtype);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  }
  return WriteFileAtomic(path, *bytes);
}

}  // namespace pp::common
