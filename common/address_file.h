// The address file of a daemon (--address_file=PATH): once ppcoord or ppworker serves, it writes
// the addresses it actually bound as one line of JSON, {"grpc":"HOST:PORT","metrics":"HOST:PORT"},
// so whoever started it with port 0 (ppctl up, the tests) learns the ports.
// Contract: WriteAddressFile replaces `path` atomically (common::WriteFileAtomic: a temporary file
// in the same folder, renamed over it), so a reader polling `path` sees no file or a complete one,
// never a prefix. ReadAddressFile returns NotFound while there is no file and InvalidArgument for
// one that is not such JSON. Thread-safe.
#ifndef PP_COMMON_ADDRESS_FILE_H_
#define PP_COMMON_ADDRESS_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pp::common {

struct DaemonAddresses {
  std::string grpc;
  std::string metrics;

  // The file's one line, newline included; the daemons log it too.
  std::string ToJson() const;
};

absl::Status WriteAddressFile(const std::string& path, const DaemonAddresses& addresses);
absl::StatusOr<DaemonAddresses> ReadAddressFile(const std::string& path);

}  // namespace pp::common

#endif  // PP_COMMON_ADDRESS_FILE_H_
