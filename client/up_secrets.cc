#include "client/up_secrets.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace pp::client {
namespace {

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

// Long enough for one run; short, because nothing revokes them.
constexpr long kValidSeconds = 30L * 24 * 3600;
// The subject OU that makes a client certificate an admin on ppcoord's job API
// (coordinator/auth.h).
constexpr char kAdminUnit[] = "pipeline-admin";

absl::Status OpensslError(absl::string_view step) {
  return absl::InternalError(absl::StrCat("ppctl up: making its certificates: ", step, " failed"));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (extension == nullptr) return false;
  const bool added = X509_add_ext(cert, extension, -1) == 1;
  X509_EXTENSION_free(extension);
  return added;
}

// A new P-256 key and a certificate for CN=name (and OU=pipeline-admin when `admin`): self-signed
// CA when `issuer` is null, else a leaf signed by issuer / issuer_key.
absl::Status NewCert(const std::string& name, bool admin, X509* issuer, EVP_PKEY* issuer_key,
                     Key* key_out, Cert* cert_out) {
  Key key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  if (key == nullptr) return OpensslError("EC key generation");
  Cert cert(X509_new(), &X509_free);
  uint64_t serial = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return OpensslError("RAND_bytes");
  }
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), kValidSeconds);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  if (admin) {
    X509_NAME_add_entry_by_txt(subject, "OU", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(kAdminUnit), -1, -1, 0);
  }
  const bool ca = issuer == nullptr;
  X509_set_issuer_name(cert.get(), ca ? subject : X509_get_subject_name(issuer));
  X509* signer = ca ? cert.get() : issuer;
  const bool extended =
      ca ? AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE") &&
               AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign")
         : AddExtension(cert.get(), signer, NID_subject_alt_name,
                        absl::StrCat("DNS:", name, ",DNS:localhost,IP:127.0.0.1"));
  if (!extended) return OpensslError("adding the certificate's extensions");
  if (X509_sign(cert.get(), ca ? key.get() : issuer_key, EVP_sha256()) == 0) {
    return OpensslError("X509_sign");
  }
  *key_out = std::move(key);
  *cert_out = std::move(cert);
  return absl::OkStatus();
}

// `bytes` into `path`; created 0600 when `secret` (no chmod after: no moment readable by others).
absl::Status Write(const std::string& path, const std::string& bytes, bool secret) {
  return common::WriteFileAtomic(path, bytes, secret ? 0600 : 0644);
}

// The secrets' folder: made 0700, and refused when another user owns it or may write into it (a
// world-writable folder under /tmp lets anyone swap a key or read one in the making).
absl::Status PrivateDir(const std::string& dir) {
  if (absl::Status made = common::MakeDirs(dir); !made.ok()) return made;
  struct stat info;
  if (::lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": not a folder"));
  }
  if (info.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": owned by uid ", info.st_uid, ", not this user (", ::geteuid(),
                     "); give ppctl up a --data_dir of your own"));
  }
  if (::chmod(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("chmod 0700 ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WritePem(const UpSecrets& secrets, const std::string& name, X509* cert,
                      EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(BIO_new(BIO_s_mem()), &BIO_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(BIO_new(BIO_s_mem()), &BIO_free);
  if (PEM_write_bio_X509(cert_bio.get(), cert) != 1 ||
      (key != nullptr &&
       PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)) {
    return OpensslError("PEM encoding");
  }
  auto text = [](BIO* bio) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    return std::string(data, n > 0 ? n : 0);
  };
  if (absl::Status s = Write(secrets.Cert(name), text(cert_bio.get()), false); !s.ok()) return s;
  if (key == nullptr) return absl::OkStatus();
  return Write(secrets.Key(name), text(key_bio.get()), true);
}

}  // namespace

std::vector<std::string> UpSecrets::DaemonFlags(const std::string& name) const {
  return {"--tls_cert=" + Cert(name), "--tls_key=" + Key(name), "--tls_ca=" + ca};
}

absl::StatusOr<UpSecrets> MakeUpSecrets(const std::string& dir,
                                        const std::vector<std::string>& names,
                                        const std::vector<std::string>& admins, bool view_token) {
  UpSecrets secrets{dir, dir + "/ca.crt", dir + "/tokens", dir + "/token", ""};
  if (absl::Status made = PrivateDir(dir); !made.ok()) return made;
  Key ca_key(nullptr, &EVP_PKEY_free);
  Cert ca(nullptr, &X509_free);
  if (absl::Status s = NewCert("ppctl-up-ca", false, nullptr, nullptr, &ca_key, &ca); !s.ok()) {
    return s;
  }
  if (absl::Status s = WritePem(secrets, "ca", ca.get(), nullptr); !s.ok()) return s;
  for (const auto& [holders, admin] : {std::pair(&names, false), std::pair(&admins, true)}) {
    for (const std::string& name : *holders) {
      Key key(nullptr, &EVP_PKEY_free);
      Cert cert(nullptr, &X509_free);
      if (absl::Status s = NewCert(name, admin, ca.get(), ca_key.get(), &key, &cert); !s.ok()) {
        return s;
      }
      if (absl::Status s = WritePem(secrets, name, cert.get(), key.get()); !s.ok()) return s;
    }
  }
  auto new_token = [](std::string* token) {
    unsigned char random[32];
    if (RAND_bytes(random, sizeof(random)) != 1) return OpensslError("RAND_bytes");
    *token =
        absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(random), sizeof(random)));
    return absl::OkStatus();
  };
  std::string token;
  if (absl::Status s = new_token(&token); !s.ok()) return s;
  std::string lines = token + " admin you\n";
  std::string viewer;
  if (view_token) {
    if (absl::Status s = new_token(&viewer); !s.ok()) return s;
    lines += viewer + " view viewer\n";
    secrets.view_token_file = dir + "/view-token";
  }
  if (absl::Status s = Write(secrets.tokens_file, lines, true); !s.ok()) return s;
  if (absl::Status s = Write(secrets.token_file, token + "\n", true); !s.ok()) return s;
  if (view_token) {
    if (absl::Status s = Write(secrets.view_token_file, viewer + "\n", true); !s.ok()) return s;
  }
  return secrets;
}

}  // namespace pp::client
