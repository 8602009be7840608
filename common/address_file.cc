#include "common/address_file.h"

#include <google/protobuf/struct.pb.h>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/proto_io.h"

namespace pp::common {

std::string DaemonAddresses::ToJson() const {
  // Hosts and ports hold no character that JSON would escape.
  return absl::StrCat("{\"grpc\":\"", grpc, "\",\"metrics\":\"", metrics, "\"}\n");
}

absl::Status WriteAddressFile(const std::string& path, const DaemonAddresses& addresses) {
  return WriteFileAtomic(path, addresses.ToJson());
}

absl::StatusOr<DaemonAddresses> ReadAddressFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  google::protobuf::Struct parsed;
  if (absl::Status s = JsonToMessage(*text, &parsed); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("address file ", path, ": ", s.message()));
  }
  const auto& fields = parsed.fields();
  auto text_field = [&](const std::string& key) -> const google::protobuf::Value* {
    auto it = fields.find(key);
    return it == fields.end() || !it->second.has_string_value() ? nullptr : &it->second;
  };
  const google::protobuf::Value* grpc = text_field("grpc");
  const google::protobuf::Value* metrics = text_field("metrics");
  if (grpc == nullptr || metrics == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("address file ", path, ": want {\"grpc\":\"h:p\",\"metrics\":\"h:p\"}"));
  }
  return DaemonAddresses{grpc->string_value(), metrics->string_value()};
}

}  // namespace pp::common
