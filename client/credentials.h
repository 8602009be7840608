// How ppctl's server commands reach ppcoord securely, from their flags:
//   --ca=PEM        TLS, trusting this CA (whenever it is given; plaintext otherwise)
//   --cert, --key   a client certificate of that CA (an admin by certificate); both or neither
//   --token_file    a file whose first line is the bearer token; default $PPCTL_TOKEN_FILE, else
//                   ~/.config/pipeline/token. A default file that does not exist means "no token";
//                   a named one that does not exist is an error.
// Contract: ClientCredentialsFromFlags reads the files once; a problem is InvalidArgument naming
// the flag and the file, never the token's text. Not thread-safe (reads flags; main only).
#ifndef PP_CLIENT_CREDENTIALS_H_
#define PP_CLIENT_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace pp::client {

struct ClientCredentials {
  std::shared_ptr<grpc::ChannelCredentials> channel;  // TLS or plaintext
  bool tls = false;
  std::string token;  // empty: send none
};

absl::StatusOr<ClientCredentials> ClientCredentialsFromFlags();

// The names of the flags above, for the commands that take them.
inline const char* const kCredentialFlags[] = {"ca", "cert", "key", "token_file"};

}  // namespace pp::client

#endif  // PP_CLIENT_CREDENTIALS_H_
