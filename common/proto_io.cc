#include "common/proto_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver_util.h>

#include <memory>

namespace pp::common {

absl::Status JsonToMessage(absl::string_view json, google::protobuf::Message* message) {
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(status.message()));
}

// MessageToJsonString prints map entries (google.protobuf.Struct fields among them) in hash
// order, which differs from run to run; checkpoints and safetensors headers must be the same bytes
// for the same content. So: deterministic binary (map keys sorted), then binary -> JSON, which
// keeps the wire order.
absl::StatusOr<std::string> MessageToJson(const google::protobuf::Message& message, bool pretty) {
  static constexpr char kUrlPrefix[] = "type.googleapis.com";
  std::string binary;
  {
    google::protobuf::io::StringOutputStream out(&binary);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded)) {
      return absl::InternalError("cannot serialize " + message.GetTypeName());
    }
  }
  std::unique_ptr<google::protobuf::util::TypeResolver> resolver(
      google::protobuf::util::NewTypeResolverForDescriptorPool(
          kUrlPrefix, message.GetDescriptor()->file()->pool()));
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = false;
  std::string json;
  auto status = google::protobuf::util::BinaryToJsonString(
      resolver.get(), std::string(kUrlPrefix) + "/" + message.GetDescriptor()->full_name(), binary,
      &json, options);
  if (!status.ok()) return absl::InternalError(std::string(status.message()));
  return json;
}

}  // namespace pp::common
