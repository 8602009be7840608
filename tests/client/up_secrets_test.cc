// ppctl up's secrets (client/up_secrets.h): keys and tokens are created 0600 in a 0700 folder,
// never readable by others in between, a folder another user owns is refused, and only the admin
// client's certificate carries the admin mark (OU=pipeline-admin).
#include "client/up_secrets.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pp::client {
namespace {

namespace fs = std::filesystem;

unsigned ModeOf(const std::string& path) {
  struct stat info;
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

// The subject OU of the certificate in `path`; "" when it has none.
std::string UnitOf(const std::string& path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> file(std::fopen(path.c_str(), "r"), &std::fclose);
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return "";
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_X509(file.get(), nullptr, nullptr, nullptr), &X509_free);
  EXPECT_NE(cert, nullptr) << path;
  char unit[256] = {};
  const int n = cert == nullptr ? -1
                                : X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()),
                                                            NID_organizationalUnitName, unit,
                                                            sizeof(unit));
  return n > 0 ? std::string(unit, n) : "";
}

class UpSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / absl::StrCat("up-secrets-", ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(UpSecretsTest, KeysAndTokensAre0600InA0700Folder) {
  // A permissive umask: the modes must come from the creation, not from the caller's umask.
  const mode_t old = ::umask(0);
  absl::StatusOr<UpSecrets> secrets = MakeUpSecrets((dir_ / "tls").string(), {"ppcoord", "w0"});
  ::umask(old);
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(ModeOf((dir_ / "tls").string()), 0700u);
  for (const std::string& secret : {secrets->Key("ppcoord"), secrets->Key("w0"),
                                    secrets->tokens_file, secrets->token_file}) {
    EXPECT_EQ(ModeOf(secret), 0600u) << secret;
  }
  EXPECT_EQ(ModeOf(secrets->Cert("w0")), 0644u);
  EXPECT_EQ(ModeOf(secrets->ca), 0644u);
}

// ppctl up's own client certificate is an admin on ppcoord's job API; the daemons' are not, so a
// worker's key is no admin key.
TEST_F(UpSecretsTest, OnlyTheAdminsCertificateIsMarkedAdmin) {
  absl::StatusOr<UpSecrets> secrets =
      MakeUpSecrets((dir_ / "tls").string(), {"ppcoord", "w0"}, {"ppctl"});
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(UnitOf(secrets->Cert("ppctl")), "pipeline-admin");
  EXPECT_EQ(ModeOf(secrets->Key("ppctl")), 0600u);
  for (const char* daemon : {"ppcoord", "w0"}) EXPECT_EQ(UnitOf(secrets->Cert(daemon)), "");
}

// `ppctl up --view_token`: a second token, of role view, in its own 0600 file and on its own line
// of ppcoord's token file after the admin's.
TEST_F(UpSecretsTest, AViewTokenIsASecondLineOfRoleView) {
  absl::StatusOr<UpSecrets> plain = MakeUpSecrets((dir_ / "plain").string(), {"w0"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->view_token_file, "");
  EXPECT_FALSE(fs::exists(dir_ / "plain" / "view-token"));
  absl::StatusOr<UpSecrets> secrets = MakeUpSecrets((dir_ / "tls").string(), {"w0"}, {}, true);
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ(ModeOf(secrets->view_token_file), 0600u);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string admin = read(secrets->token_file);
  const std::string viewer = read(secrets->view_token_file);
  ASSERT_EQ(admin.size(), 65u);
  ASSERT_EQ(viewer.size(), 65u);
  EXPECT_NE(admin, viewer);
  EXPECT_EQ(read(secrets->tokens_file),
            admin.substr(0, 64) + " admin you\n" + viewer.substr(0, 64) + " view viewer\n");
}

TEST_F(UpSecretsTest, AFolderOfAnotherUserIsRefused) {
  const fs::path tls = dir_ / "tls";
  fs::create_directories(tls);
  fs::permissions(tls, fs::perms::all);  // 0777, as a shared /tmp folder may be
  // As root (CI and this project's machines) the folder is handed to nobody; as another user
  // it cannot be, and the owner check is then out of this test's reach.
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root to make a folder of another user";
  ASSERT_EQ(::chown(tls.c_str(), 65534, 65534), 0);
  absl::StatusOr<UpSecrets> secrets = MakeUpSecrets(tls.string(), {"w0"});
  EXPECT_EQ(secrets.status().code(), absl::StatusCode::kFailedPrecondition) << secrets.status();
  EXPECT_NE(secrets.status().message().find("owned by uid 65534"), std::string::npos)
      << secrets.status();
  EXPECT_FALSE(fs::exists(tls / "ca.crt")) << "nothing is written into it";
}

}  // namespace
}  // namespace pp::client
