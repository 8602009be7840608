#include "common/tls.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/host_port.h"
#include "common/loopback.h"

namespace pp::common {
namespace {

// A PEM file larger than this is no certificate or key of ours.
constexpr uint64_t kMaxPemBytes = 1 << 20;

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
}

X509Ptr ParseCert(const std::string& pem) {
  Bio bio = MemoryBio(pem);
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
}

std::string CommonName(X509* cert) {
  char name[256] = {};
  const int n =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, sizeof(name));
  return n > 0 ? std::string(name, n) : "";
}

std::vector<std::string> OrganizationalUnits(X509* cert) {
  std::vector<std::string> units;
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, i)) {
    const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
    units.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                       ASN1_STRING_length(data));
  }
  return units;
}

// SHA-256 of the certificate's DER, as `openssl x509 -fingerprint -sha256` prints it but in
// lowercase hex without colons.
std::string Fingerprint(X509* cert) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (X509_digest(cert, EVP_sha256(), digest, &size) != 1) return "";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), size));
}

absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path, kMaxPemBytes);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read: ", pem.status().message()));
  }
  return pem;
}

absl::Status Bad(absl::string_view flag, const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": ", why));
}

// Reads and checks the certificate and key into `config`.
absl::Status LoadCertAndKey(const TlsPaths& paths, absl::string_view prefix, TlsConfig& config) {
  const std::string cert_flag = absl::StrCat(prefix, "cert"),
                    key_flag = absl::StrCat(prefix, "key");
  absl::StatusOr<std::string> cert = ReadPem(cert_flag, paths.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(key_flag, paths.key);
  if (!key.ok()) return key.status();
  X509Ptr x509 = ParseCert(*cert);
  if (x509 == nullptr) return Bad(cert_flag, paths.cert, "not a PEM certificate");
  Bio key_bio = MemoryBio(*key);
  KeyPtr pkey(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (pkey == nullptr) return Bad(key_flag, paths.key, "not an unencrypted PEM private key");
  if (X509_check_private_key(x509.get(), pkey.get()) != 1) {
    return Bad(key_flag, paths.key, absl::StrCat("does not match the certificate ", paths.cert));
  }
  config.cert_pem = *std::move(cert);
  config.key_pem = *std::move(key);
  config.common_name = CommonName(x509.get());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TlsConfig> LoadTls(const TlsPaths& paths, bool need_cert,
                                  absl::string_view flag_prefix) {
  const bool has_cert = !paths.cert.empty() || !paths.key.empty();
  if (paths.ca.empty() || (need_cert && (paths.cert.empty() || paths.key.empty())) ||
      (has_cert && (paths.cert.empty() || paths.key.empty()))) {
    return absl::InvalidArgumentError(absl::StrCat("TLS needs --", flag_prefix, "ca, and --",
                                                   flag_prefix, "cert with --", flag_prefix, "key",
                                                   need_cert ? "" : " or neither"));
  }
  TlsConfig config;
  const std::string ca_flag = absl::StrCat(flag_prefix, "ca");
  absl::StatusOr<std::string> ca = ReadPem(ca_flag, paths.ca);
  if (!ca.ok()) return ca.status();
  if (ParseCert(*ca) == nullptr) return Bad(ca_flag, paths.ca, "not a PEM certificate");
  config.ca_pem = *std::move(ca);
  if (has_cert) {
    if (absl::Status s = LoadCertAndKey(paths, flag_prefix, config); !s.ok()) return s;
  }
  return config;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsConfig& tls, bool require) {
  grpc::SslServerCredentialsOptions options(
      require ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsConfig& tls) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_private_key = tls.key_pem;
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

std::optional<PeerCert> VerifiedPeer(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  const std::vector<grpc::string_ref> pems =
      auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) return std::nullopt;
  return PeerCertOf(std::string(pems.front().data(), pems.front().size()));
}

std::optional<PeerCert> PeerCertOf(const std::string& pem) {
  X509Ptr cert = ParseCert(pem);
  if (cert == nullptr) return std::nullopt;
  return PeerCert{CommonName(cert.get()), OrganizationalUnits(cert.get()),
                  Fingerprint(cert.get())};
}

std::string PeerName(const grpc::ServerContext& context) {
  std::optional<PeerCert> peer = VerifiedPeer(context);
  return peer.has_value() ? std::move(peer->name) : std::string();
}

bool PeerIs(const grpc::ServerContext& context, absl::string_view name) {
  return !name.empty() && PeerName(context) == name;
}

absl::Status CheckListenAddress(absl::string_view program, absl::string_view flag,
                                absl::string_view address, bool tls, bool insecure) {
  if (tls) return absl::OkStatus();
  absl::StatusOr<HostPort> at = ParseHostPort(address, flag);
  if (!at.ok()) return at.status();
  if (IsLoopbackHost(at->host)) return absl::OkStatus();
  if (!insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", address,
        " is not a loopback address: give --tls_cert, --tls_key and --tls_ca, or --insecure "
        "to serve plaintext without authentication"));
  }
  std::cerr << program << ": WARNING: --insecure: serving plaintext gRPC on " << address
            << " without TLS or client authentication\n";
  return absl::OkStatus();
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::StatusOr<HostPort> at = ParseHostPort(address);
  return at.ok() && IsLoopbackHost(at->host);
}

absl::Status CheckRootsGiven(
    absl::string_view grpc_address, bool insecure,
    const std::vector<std::pair<const char*, const std::vector<std::string>*>>& roots_flags) {
  if (insecure || IsLoopbackAddress(grpc_address)) return absl::OkStatus();
  for (const auto& [flag, roots] : roots_flags) {
    if (roots->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " is needed with --grpc=", grpc_address,
                       " (not loopback): the folders a job may name, or --insecure"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<TlsConfig>> LoadDaemonTls(absl::string_view program,
                                                       absl::string_view grpc_address,
                                                       const TlsPaths& paths, bool insecure) {
  if (absl::Status listen =
          CheckListenAddress(program, "grpc", grpc_address, !paths.empty(), insecure);
      !listen.ok()) {
    return listen;
  }
  if (paths.empty()) return std::optional<TlsConfig>();
  absl::StatusOr<TlsConfig> tls = LoadTls(paths);
  if (!tls.ok()) return tls.status();
  return std::optional<TlsConfig>(*std::move(tls));
}

}  // namespace pp::common
