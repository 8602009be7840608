// Proto3 JSON through protobuf's json_util, returning absl::Status (Debian's protobuf 3.21 has its
// own Status type). Parsing is strict about unknown fields; messages are the parser's own.
#ifndef PP_COMMON_PROTO_IO_H_
#define PP_COMMON_PROTO_IO_H_

#include <google/protobuf/message.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

absl::Status JsonToMessage(absl::string_view json, google::protobuf::Message* message);
// lowerCamelCase field names; `pretty` adds newlines and indentation.
absl::StatusOr<std::string> MessageToJson(const google::protobuf::Message& message,
                                          bool pretty = false);

}  // namespace pp::common

#endif  // PP_COMMON_PROTO_IO_H_
