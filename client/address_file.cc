#include "client/address_file.h"

#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pp::client {

std::optional<Addresses> ReadAddressFile(const std::string& path) {
  absl::StatusOr<std::string> text = pp::common::ReadFile(path);
  if (!text.ok()) return std::nullopt;
  google::protobuf::Struct parsed;
  if (!google::protobuf::util::JsonStringToMessage(*text, &parsed).ok()) return std::nullopt;
  const auto& fields = parsed.fields();
  if (!fields.contains("grpc") || !fields.contains("metrics")) return std::nullopt;
  return Addresses{fields.at("grpc").string_value(), fields.at("metrics").string_value()};
}

}  // namespace pp::client
