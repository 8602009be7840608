// The token file: its format, its errors (which never show a token) and the lookup; which
// client certificates are admins.
#include "coordinator/auth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(TokenTableTest, FindsEachUserByItsToken) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse(
      "# TOKEN ROLE NAME\n\n  t-admin admin ops\nt-sub\tsubmit alice\nt-view view vera\n", "f");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  std::optional<Caller> alice = table->Find("t-sub");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, Role::kSubmit);
  EXPECT_EQ(table->Find("t-admin")->role, Role::kAdmin);
  EXPECT_EQ(table->Find("t-view")->role, Role::kView);
  EXPECT_FALSE(table->Find("t-su").has_value());
  EXPECT_FALSE(table->Find("").has_value());
}

TEST(TokenTableTest, BadLinesNameTheLineButNotTheToken) {
  for (const char* text : {"secret-1 admin\n", "secret-1 root ops\n",
                           "a admin x\nsecret-1 view y\nsecret-1 view z\n"}) {
    absl::StatusOr<TokenTable> table = TokenTable::Parse(text, "--auth_tokens=/t");
    ASSERT_FALSE(table.ok()) << text;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(table.status().message(), HasSubstr("--auth_tokens=/t line "));
    EXPECT_THAT(table.status().message(), Not(HasSubstr("secret-1")));
  }
}

TEST(TokenTableTest, AMissingFileIsNamed) {
  absl::StatusOr<TokenTable> table = TokenTable::Load("/nonexistent/tokens");
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), HasSubstr("--auth_tokens=/nonexistent/tokens"));
}

// A certificate of the CA is no admin for being one: a worker's is not (coordinator/auth.h).
TEST(AdminCertificateTest, OnlyTheAdminUnitMakesAnAdmin) {
  EXPECT_TRUE(IsAdminCertificate({.name = "ops", .units = {"team", "pipeline-admin"}}));
  EXPECT_FALSE(IsAdminCertificate({.name = "w0", .units = {}}));
  EXPECT_FALSE(IsAdminCertificate({.name = "w0", .units = {"pipeline-admins"}}));
  EXPECT_FALSE(IsAdminCertificate({.name = "w0", .units = {"Pipeline-Admin"}}));
  EXPECT_FALSE(IsAdminCertificate({.name = "", .units = {"pipeline-admin"}}));
}

}  // namespace
}  // namespace pp::coordinator
