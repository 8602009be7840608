#include "tests/e2e/security/test_certs.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tls.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace pp::security_test {
namespace {

constexpr absl::Duration kOpensslTimeout = absl::Seconds(30);

// The openssl program on $PATH (RunCommand takes a path, not a name to look up).
std::string OpensslPath() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/openssl");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "openssl";
}

// A new P-256 key and a request (or, with "-x509", a self-signed certificate) for CN=name and
// `more` of a subject ("/OU=...").
std::vector<std::string> NewKeyArgs(const std::string& dir, const std::string& name,
                                    const std::string& more = "") {
  return {"req",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:prime256v1",
          "-nodes",
          "-keyout",
          Files(dir, name).key,
          "-subj",
          "/CN=" + name + more};
}

absl::StatusOr<std::string> OpensslOutput(std::vector<std::string> args) {
  args.insert(args.begin(), OpensslPath());
  absl::StatusOr<testing_support::CommandResult> run =
      testing_support::RunCommand(args, kOpensslTimeout);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("openssl ", args[1], " exited ", run->exit_code, ": ", run->err));
  }
  return run->out;
}

absl::Status Openssl(std::vector<std::string> args) {
  return OpensslOutput(std::move(args)).status();
}

// `name`'s certificate signed by CA `ca`, with `more` of a subject after its CN.
absl::Status SignedCert(const std::string& dir, const std::string& ca, const std::string& name,
                        const std::string& more) {
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  std::ofstream(ext) << "subjectAltName=DNS:" << name << ",DNS:localhost,IP:127.0.0.1\n";
  std::vector<std::string> request = NewKeyArgs(dir, name, more);
  request.insert(request.end(), {"-out", csr});
  if (absl::Status s = Openssl(request); !s.ok()) return s;
  return Openssl({"x509", "-req", "-in", csr, "-CA", Files(dir, ca).cert, "-CAkey",
                  Files(dir, ca).key, "-CAcreateserial", "-days", "2", "-extfile", ext, "-out",
                  Files(dir, name).cert});
}

}  // namespace

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  std::vector<std::string> args = NewKeyArgs(dir, name);
  args.insert(args.end(), {"-x509", "-days", "2", "-out", Files(dir, name).cert, "-addext",
                           "basicConstraints=critical,CA:TRUE", "-addext",
                           "keyUsage=critical,keyCertSign,cRLSign"});
  return Openssl(args);
}

absl::Status MakeCert(const std::string& dir, const std::string& ca, const std::string& name) {
  return SignedCert(dir, ca, name, "");
}

absl::Status MakeAdminCert(const std::string& dir, const std::string& ca,
                           const std::string& name) {
  return SignedCert(dir, ca, name, "/OU=pipeline-admin");
}

absl::StatusOr<std::string> FingerprintLine(const std::string& dir, const std::string& name) {
  return OpensslOutput({"x509", "-in", Files(dir, name).cert, "-noout", "-fingerprint", "-sha256"});
}

absl::Status MakeCertFolder(const std::string& dir, const std::vector<std::string>& names,
                            const std::vector<std::string>& admins) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  if (absl::Status s = MakeCa(dir, "ca"); !s.ok()) return s;
  for (const std::string& name : names) {
    if (absl::Status s = MakeCert(dir, "ca", name); !s.ok()) return s;
  }
  for (const std::string& name : admins) {
    if (absl::Status s = MakeAdminCert(dir, "ca", name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<std::string> TlsFlags(const std::string& dir, const std::string& name) {
  return {"--tls_cert=" + Files(dir, name).cert, "--tls_key=" + Files(dir, name).key,
          "--tls_ca=" + Files(dir, "ca").cert};
}

std::string BinDir() {
  const char* dir = std::getenv("PP_TEST_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : PP_BIN_DIR;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& dir,
                                                            const std::string& cert,
                                                            const std::string& token,
                                                            const std::string& ca) {
  common::TlsPaths paths;
  paths.ca = Files(dir, ca).cert;
  if (!cert.empty()) {
    paths.cert = Files(dir, cert).cert;
    paths.key = Files(dir, cert).key;
  }
  absl::StatusOr<common::TlsConfig> tls = common::LoadTls(paths, /*need_cert=*/false);
  EXPECT_TRUE(tls.ok()) << tls.status();
  std::shared_ptr<grpc::ChannelCredentials> channel = common::ChannelCredentials(*tls);
  if (token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel, grpc::AccessTokenCredentials(token));
}

absl::StatusOr<std::unique_ptr<testing_support::Cluster>> StartSecureCluster(
    const SecureCluster& secure) {
  testing_support::ClusterOptions options;
  options.bin_dir = secure.bin_dir;
  options.dir = secure.cluster_dir;
  options.coordinator_flags = TlsFlags(secure.certs, "ppcoord");
  options.coordinator_flags.insert(options.coordinator_flags.end(),
                                   {"--data_root=" + secure.root, "--worker_timeout=2s",
                                    "--heartbeat_interval=200ms"});
  options.coordinator_flags.insert(options.coordinator_flags.end(),
                                   secure.coordinator_flags.begin(),
                                   secure.coordinator_flags.end());
  options.worker_flags = {"--comm_timeout=10s", "--data_root=" + secure.root,
                          "--checkpoint_root=" + secure.root};
  options.credentials = secure.credentials;
  absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
      testing_support::Cluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  for (int i = 0; i < secure.workers; ++i) {
    const std::string name = absl::StrCat("w", i);
    testing_support::WorkerOptions worker;
    worker.flags = TlsFlags(secure.certs, name);
    worker.flags.insert(worker.flags.end(), secure.worker_flags.begin(),
                        secure.worker_flags.end());
    if (absl::Status started = (*cluster)->StartWorker(name, worker); !started.ok()) {
      return absl::Status(started.code(),
                          absl::StrCat(started.message(), "\n", (*cluster)->Logs()));
    }
  }
  return cluster;
}

}  // namespace pp::security_test
