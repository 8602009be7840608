// The address files ppcoord and ppworker write with --address_file: {"grpc":"h:p","metrics":"h:p"}.
#ifndef PP_CLIENT_ADDRESS_FILE_H_
#define PP_CLIENT_ADDRESS_FILE_H_

#include <optional>
#include <string>

namespace pp::client {

struct Addresses {
  std::string grpc, metrics;
};

// The addresses in `path`, or nothing while the file is absent, unparsable or lacks either field
// (callers poll until a daemon has written it).
std::optional<Addresses> ReadAddressFile(const std::string& path);

}  // namespace pp::client

#endif  // PP_CLIENT_ADDRESS_FILE_H_
