// The certificate deny-list (common/cert_deny_list.h): its file format, its errors, a reload
// that keeps the old list when the new file is bad; and what the daemons read from a peer's
// certificate (common/tls.h PeerCertOf): the CN as its one name, its OUs and its fingerprint.
#include "common/cert_deny_list.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// openssl req -x509 -subj /CN=ops/OU=pipeline-admin/OU=second, with SANs localhost and 127.0.0.1.
constexpr char kCert[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIB5DCCAYmgAwIBAgIUSIolIrKL3gTDj3JK7vjHow1NcJUwCgYIKoZIzj0EAwIw\n"
    "ODEMMAoGA1UEAwwDb3BzMRcwFQYDVQQLDA5waXBlbGluZS1hZG1pbjEPMA0GA1UE\n"
    "CwwGc2Vjb25kMCAXDTI2MTIwMzIxNDcxOVoYDzIxMjYxMTA5MjE0NzE5WjA4MQww\n"
    "CgYDVQQDDANvcHMxFzAVBgNVBAsMDnBpcGVsaW5lLWFkbWluMQ8wDQYDVQQLDAZz\n"
    "ZWNvbmQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASgISh0+PETzjTApC3IqWOe\n"
    "PNgUiI4xAMPYmhiNL90UJEtpU94opXVO07keJmEguJViTzuyIFwHjGHEVgv03AMe\n"
    "o28wbTAdBgNVHQ4EFgQUNMgPbwsn/7ZuCIv5HkbmwQNNTmQwHwYDVR0jBBgwFoAU\n"
    "NMgPbwsn/7ZuCIv5HkbmwQNNTmQwDwYDVR0TAQH/BAUwAwEB/zAaBgNVHREEEzAR\n"
    "gglsb2NhbGhvc3SHBH8AAAEwCgYIKoZIzj0EAwIDSQAwRgIhAK/VqS0iwqtNAjf0\n"
    "3LMIu4fUmUiM0vVa1tGcMFwHZgYaAiEAnrgzZd8XZrnboO3ReHgOZvI6U2r5Pzm2\n"
    "EIHlHHb8Y1M=\n"
    "-----END CERTIFICATE-----\n";
// `openssl x509 -noout -fingerprint -sha256` of kCert.
constexpr char kOpensslLine[] =
    "sha256 Fingerprint=30:3A:BE:84:84:89:DE:60:0E:AA:C7:8A:FE:FD:43:6E:90:BB:80:C1:30:42:7C:36:"
    "44:0C:D6:F6:BA:0A:C3:B5";
constexpr char kFingerprint[] = "303abe848489de600eaac78afefd436e90bb80c130427c36440cd6f6ba0ac3b5";

TEST(PeerCertTest, TheCommonNameIsTheOneNameAndTheFingerprintIsOpenssls) {
  std::optional<PeerCert> peer = PeerCertOf(kCert);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->name, "ops");
  EXPECT_THAT(peer->units, ElementsAre("pipeline-admin", "second"));
  EXPECT_EQ(peer->fingerprint, kFingerprint);
  EXPECT_FALSE(PeerCertOf("not a certificate").has_value());
}

TEST(CertDenyListTest, ReadsOpensslLinesBareHexAndComments) {
  const std::string upper_bare = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  absl::StatusOr<CertDenyList::Fingerprints> parsed = CertDenyList::Parse(
      absl::StrCat("# revoked\n\n", kOpensslLine, "  # w1, stolen\n  ", upper_bare, "\n"), "f");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed, UnorderedElementsAre(kFingerprint, std::string(64, 'a')));
  EXPECT_TRUE(CertDenyList::Parse("# nothing\n\n", "f")->empty());
}

TEST(CertDenyListTest, ABadLineIsNamed) {
  for (const char* text :
       {"abc\n", "sha256 Fingerprint=zz\n",
        "303abe848489de600eaac78afefd436e90bb80c130427c36440cd6f6ba0ac3b5ff\n"}) {
    absl::StatusOr<CertDenyList::Fingerprints> parsed =
        CertDenyList::Parse(absl::StrCat("# header\n", text), "--deny_certs=/d");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("--deny_certs=/d line 2: not a SHA-256"));
  }
}

class CertDenyListFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (std::filesystem::path(::testing::TempDir()) / absl::StrCat("deny-", ::getpid())).string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_;
};

TEST_F(CertDenyListFileTest, AReloadTakesTheNewFileOrKeepsTheOldList) {
  Write(absl::StrCat(kOpensslLine, "\n"));
  absl::StatusOr<std::shared_ptr<CertDenyList>> list = CertDenyList::Load(path_);
  ASSERT_TRUE(list.ok()) << list.status();
  const PeerCert ops = *PeerCertOf(kCert);
  const absl::Status denied = (*list)->Check(ops, "pp.v1.Worker/GetStatus");
  EXPECT_EQ(denied.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(
      denied.message(),
      HasSubstr(absl::StrCat("pp.v1.Worker/GetStatus: the client certificate of ops (sha256 ",
                             kFingerprint, ") is revoked (--deny_certs=", path_, ")")));

  Write("garbage\n");
  absl::StatusOr<std::string> bad = (*list)->Reload();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("still denying the 1 certificate read before"));
  EXPECT_TRUE((*list)->Denies(kFingerprint));

  Write("# all forgiven\n");
  absl::StatusOr<std::string> good = (*list)->Reload();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, absl::StrCat("--deny_certs=", path_, ": denying 0 certificates"));
  EXPECT_TRUE((*list)->Check(ops, "pp.v1.Worker/GetStatus").ok());
}

TEST_F(CertDenyListFileTest, NoPathDeniesNothingAndAMissingFileIsNamed) {
  absl::StatusOr<std::shared_ptr<CertDenyList>> none = CertDenyList::Load("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE((*none)->Check(*PeerCertOf(kCert), "m").ok());
  EXPECT_TRUE((*none)->Reload().ok());
  absl::StatusOr<std::shared_ptr<CertDenyList>> missing = CertDenyList::Load(path_);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr(absl::StrCat("--deny_certs=", path_, ": cannot read")));
}

}  // namespace
}  // namespace pp::common
