// ppcoord's scheduling policy (coordinator/policy.h): Default(), the text format and its refusals
// (each naming the source and the line), who may use which class, quotas and preemption defaults.
#include "coordinator/policy.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kSource = "--policy=/etc/pp/policy.txt";

// Every part of a policy, one field a line, so that a refusal's line is easy to predict.
constexpr absl::string_view kFullPolicy =
    R"pb(# the shared cluster's policy
         priority_class { name: "low" value: 0 }
         priority_class { name: "normal" value: 100 }
         priority_class {
           name: "high"
           value: 200
           allowed: [ "submit", "bob" ]
         }
         priority_class { name: "urgent" value: 1000 allowed: "carol" }
         default_class: "low"
         quota { owner: "alice" max_workers: 8 max_queued_jobs: 3 borrow: true }
         quota { owner: "*" max_workers: 4 }
         aging { every_seconds: 30 step: 2 max_boost: 50 reserve_after_seconds: 600 }
         preemption { max_per_hour: 2 grace_seconds: 45.5 }
    )pb";

Policy MustParse(absl::string_view text) {
  absl::StatusOr<Policy> policy = Policy::Parse(text, kSource);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : Policy::Default();
}

std::vector<std::string> ClassNames(const Policy& policy) {
  std::vector<std::string> names;
  for (const pp::v1::PriorityClass& c : policy.proto().priority_class()) names.push_back(c.name());
  return names;
}

Caller Viewer(const std::string& name) { return Caller{name, Role::kView}; }
Caller Submitter(const std::string& name) { return Caller{name, Role::kSubmit}; }

TEST(PolicyDefaultTest, ClassesLowNormalHighForEveryoneAndNormalByDefault) {
  const Policy policy = Policy::Default();
  EXPECT_THAT(ClassNames(policy), ElementsAre("low", "normal", "high"));
  for (const pp::v1::PriorityClass& c : policy.proto().priority_class()) {
    EXPECT_TRUE(c.allowed().empty()) << c.name();
  }
  EXPECT_EQ(policy.proto().default_class(), "normal");
  EXPECT_EQ(*policy.PriorityOf("low", Viewer("vera")), 0);
  EXPECT_EQ(*policy.PriorityOf("normal", Submitter("alice")), 100);
  EXPECT_EQ(*policy.PriorityOf("high", Submitter("alice")), 200);
  EXPECT_EQ(*policy.PriorityOf("", Submitter("alice")), 100);
  EXPECT_EQ(policy.ClassName(""), "normal");
}

TEST(PolicyDefaultTest, NoQuotasAgingAndPreemptionAsDocumented) {
  const Policy policy = Policy::Default();
  EXPECT_EQ(policy.QuotaOf("alice"), nullptr);
  EXPECT_EQ(policy.QuotaOf("*"), nullptr);
  EXPECT_EQ(policy.aging().every_seconds(), 60);
  EXPECT_EQ(policy.aging().step(), 5);
  EXPECT_EQ(policy.aging().max_boost(), 100);
  EXPECT_EQ(policy.aging().reserve_after_seconds(), 900);
  EXPECT_FALSE(policy.preemption().disabled());
  EXPECT_EQ(policy.preemption().max_per_hour(), 4);
  EXPECT_EQ(policy.preemption().grace_seconds(), 120);
}

TEST(PolicyParseTest, AFullPolicyKeepsEveryPart) {
  const Policy policy = MustParse(kFullPolicy);
  EXPECT_THAT(ClassNames(policy), ElementsAre("low", "normal", "high", "urgent"));
  EXPECT_EQ(policy.proto().default_class(), "low");
  EXPECT_EQ(*policy.PriorityOf("urgent", Submitter("carol")), 1000);
  EXPECT_EQ(*policy.PriorityOf("", Submitter("carol")), 0);
  const pp::v1::Quota* alice = policy.QuotaOf("alice");
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->max_workers(), 8);
  EXPECT_EQ(alice->max_queued_jobs(), 3);
  EXPECT_TRUE(alice->borrow());
  EXPECT_EQ(policy.aging().every_seconds(), 30);
  EXPECT_EQ(policy.aging().step(), 2);
  EXPECT_EQ(policy.aging().max_boost(), 50);
  EXPECT_EQ(policy.aging().reserve_after_seconds(), 600);
  EXPECT_EQ(policy.preemption().max_per_hour(), 2);
  EXPECT_EQ(policy.preemption().grace_seconds(), 45.5);
}

TEST(PolicyParseTest, AnEmptyFileHasTheDefaultClassesButNoAgingOfItsOwn) {
  const Policy policy = MustParse("");
  EXPECT_THAT(ClassNames(policy), ElementsAre("low", "normal", "high"));
  EXPECT_EQ(policy.ClassName(""), "normal");
  EXPECT_EQ(policy.aging().every_seconds(), 0);
  EXPECT_EQ(policy.aging().reserve_after_seconds(), 0);
  EXPECT_EQ(policy.QuotaOf("alice"), nullptr);
}

TEST(PolicyParseTest, APolicyWithoutClassesMayPickADefaultAmongTheBuiltInOnes) {
  const Policy policy = MustParse("default_class: \"high\"\nquota { owner: \"bob\" }\n");
  EXPECT_THAT(ClassNames(policy), ElementsAre("low", "normal", "high"));
  EXPECT_EQ(*policy.PriorityOf("", Submitter("bob")), 200);
  EXPECT_EQ(policy.ClassName(""), "high");
}

TEST(PolicyParseTest, ZeroPreemptionFiguresMeanTheirDefaults) {
  const Policy zero = MustParse("preemption { disabled: true }\n");
  EXPECT_TRUE(zero.preemption().disabled());
  EXPECT_EQ(zero.preemption().max_per_hour(), 4);
  EXPECT_EQ(zero.preemption().grace_seconds(), 120);
  // proto() stays as written: only preemption() fills the defaults in.
  EXPECT_EQ(zero.proto().preemption().max_per_hour(), 0);
  const Policy half = MustParse("preemption { max_per_hour: 1 }\n");
  EXPECT_EQ(half.preemption().max_per_hour(), 1);
  EXPECT_EQ(half.preemption().grace_seconds(), 120);
  EXPECT_EQ(MustParse("").preemption().max_per_hour(), 4);
}

TEST(PolicyParseTest, ASyntaxErrorNamesTheLineAndColumn) {
  const std::string text = "priority_class {\n  name: \"low\"\n}\n\n\n\n  9\n";
  absl::StatusOr<Policy> policy = Policy::Parse(text, kSource);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy.status().message(),
            "--policy=/etc/pp/policy.txt:7:3: Expected identifier, got: 9");
}

TEST(PolicyParseTest, AnUnknownFieldIsASyntaxErrorOnItsLine) {
  absl::StatusOr<Policy> policy =
      Policy::Parse("default_class: \"normal\"\nagin { step: 1 }\n", kSource);
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(policy.status().message(), HasSubstr("--policy=/etc/pp/policy.txt:2:"));
  EXPECT_THAT(policy.status().message(), HasSubstr("agin"));
}

struct Refusal {
  const char* name;
  std::string text;
  std::string message;  // after "SOURCE:"
};

// The refusals of priority_class and default_class.
std::vector<Refusal> ClassRefusals() {
  const std::string longest(40, 'a');
  const std::string too_long(41, 'a');
  const std::string low = "priority_class {\n  name: \"low\"\n  value: 0\n}\n";
  return {
      {"duplicate class", low + "priority_class { name: \"high\" }\n" + low,
       "7: priority_class \"low\" is listed twice"},
      {"duplicate class, one line a class",
       "priority_class { name: \"high\" value: 1 }\npriority_class { name: \"low\" }\n"
       "priority_class { name: \"high\" value: 2 }\n",
       "3: priority_class \"high\" is listed twice"},
      {"upper case name", low + "priority_class {\n  name: \"High\"\n}\n",
       "6: priority_class name \"High\" must be 1 to 40 characters of a-z, 0-9 and -"},
      {"underscore", "priority_class { name: \"a_b\" }\n",
       "1: priority_class name \"a_b\" must be 1 to 40 characters of a-z, 0-9 and -"},
      {"empty name", low + "priority_class {\n  value: 7\n}\n",
       "5: priority_class name \"\" must be 1 to 40 characters of a-z, 0-9 and -"},
      {"41 characters",
       "priority_class { name: \"" + longest + "\" }\npriority_class { name: \"" + too_long +
           "\" }\n",
       "2: priority_class name \"" + too_long + "\" must be 1 to 40 characters of a-z, 0-9 and -"},
      {"newline in a name", "priority_class { name: \"a\\nb\" }\n",
       "1: priority_class name \"a\\nb\" must be 1 to 40 characters of a-z, 0-9 and -"},
      {"negative value", "priority_class {\n  name: \"low\"\n  value: -1\n}\n",
       "3: priority_class \"low\": value -1 is outside 0..1000000"},
      {"value too large", low + "priority_class {\n  name: \"top\"\n  value: 1000001\n}\n",
       "7: priority_class \"top\": value 1000001 is outside 0..1000000"},
      {"default class not listed", low + "default_class: \"normal\"\n",
       "5: default_class \"normal\" is not a priority_class: low"},
      {"default class not among the built-in ones", "\ndefault_class: \"urgent\"\n",
       "2: default_class \"urgent\" is not a priority_class: low, normal, high"},
      {"no default class and no normal", "\n" + low,
       "2: default_class is unset and no priority_class is named \"normal\": name one of low"},
      {"empty allowed entry",
       "priority_class {\n  name: \"high\"\n  allowed: \"ops\"\n"
       "  allowed: \"\"\n}\n",
       "4: priority_class \"high\": an allowed entry is empty"},
      {"empty allowed entry in a list",
       "priority_class {\n  name: \"high\"\n"
       "  allowed: [\"ops\", \"\"]\n}\n",
       "3: priority_class \"high\": an allowed entry is empty"},
  };
}

// The refusals of quota, aging and preemption.
std::vector<Refusal> FigureRefusals() {
  return {
      {"duplicate quota owner",
       "quota {\n  owner: \"*\"\n}\nquota {\n  owner: \"bob\"\n}\n"
       "quota {\n  owner: \"*\"\n}\n",
       "8: quota owner \"*\" is listed twice"},
      {"negative max_workers", "quota {\n  owner: \"bob\"\n  max_workers: -2\n}\n",
       "3: quota \"bob\": max_workers is -2; it must be 0 or more"},
      {"negative max_queued_jobs", "quota { owner: \"bob\" max_queued_jobs: -1 }\n",
       "1: quota \"bob\": max_queued_jobs is -1; it must be 0 or more"},
      {"negative every_seconds", "aging {\n  every_seconds: -60\n}\n",
       "2: aging.every_seconds is -60; it must be 0 or more"},
      {"NaN every_seconds", "aging {\n  step: 1\n  every_seconds: nan\n}\n",
       "3: aging.every_seconds is nan; it must be 0 or more"},
      {"negative step", "\naging { step: -5 }\n", "2: aging.step is -5; it must be 0 or more"},
      {"negative max_boost", "aging {\n\n  max_boost: -1\n}\n",
       "3: aging.max_boost is -1; it must be 0 or more"},
      {"negative reserve_after_seconds", "aging {\n  reserve_after_seconds: -0.5\n}\n",
       "2: aging.reserve_after_seconds is -0.5; it must be 0 or more"},
      {"negative max_per_hour", "preemption {\n  max_per_hour: -4\n}\n",
       "2: preemption.max_per_hour is -4; it must be 0 or more"},
      {"negative grace_seconds", "\n\npreemption { grace_seconds: -1 }\n",
       "3: preemption.grace_seconds is -1; it must be 0 or more"},
      // A job keeps its newest 16 preemption times: a larger bound could never be reached.
      {"max_per_hour past what a job keeps", "preemption {\n\n  max_per_hour: 17\n}\n",
       "3: preemption.max_per_hour is 17; it must be at most 16"},
  };
}

TEST(PolicyParseTest, EachRefusalNamesTheSourceAndTheLineOnOneLine) {
  std::vector<Refusal> refusals = ClassRefusals();
  for (Refusal& refusal : FigureRefusals()) refusals.push_back(std::move(refusal));
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.name);
    absl::StatusOr<Policy> policy = Policy::Parse(refusal.text, kSource);
    ASSERT_FALSE(policy.ok());
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(policy.status().message(), absl::StrCat(kSource, ":", refusal.message));
    EXPECT_THAT(policy.status().message(), Not(HasSubstr("\n")));
  }
}

TEST(PolicyParseTest, TheSameRefusalsPassOnceFixed) {
  // Near misses of the refusals above: the boundaries are allowed.
  const Policy policy =
      MustParse("priority_class { name: \"" + std::string(40, 'z') + "\" value: 1000000 }\n" +
                "priority_class { name: \"normal\" value: 0 allowed: \"view\" }\n" +
                "priority_class { name: \"0-9\" }\n"
                "quota { owner: \"\" max_workers: 0 max_queued_jobs: 0 }\n"
                "aging { every_seconds: 0 step: 0 max_boost: 0 reserve_after_seconds: 0 }\n"
                "preemption { max_per_hour: 16 grace_seconds: 0 }\n");
  EXPECT_EQ(*policy.PriorityOf(std::string(40, 'z'), Viewer("v")), 1000000);
  EXPECT_EQ(policy.ClassName(""), "normal");
}

TEST(PolicyPriorityTest, AnUnknownClassIsRefusedNamingTheClasses) {
  absl::StatusOr<int> value = Policy::Default().PriorityOf("urgent", Submitter("alice"));
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(value.status().message(),
            "priority \"urgent\" is not a class of ppcoord's policy: low, normal, high");
  // Admins too: the class does not exist for anyone.
  EXPECT_EQ(Policy::Default().PriorityOf("urgent", Caller{"", Role::kAdmin}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PolicyPriorityTest, AllowedByRoleName) {
  const Policy policy = MustParse(kFullPolicy);
  EXPECT_EQ(*policy.PriorityOf("high", Submitter("dave")), 200);
  const Policy viewers = MustParse("priority_class { name: \"normal\" allowed: \"view\" }\n");
  EXPECT_EQ(*viewers.PriorityOf("normal", Viewer("vera")), 0);
  EXPECT_EQ(viewers.PriorityOf("normal", Submitter("alice")).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PolicyPriorityTest, AllowedByOwnerName) {
  const Policy policy = MustParse(kFullPolicy);
  EXPECT_EQ(*policy.PriorityOf("urgent", Submitter("carol")), 1000);
  EXPECT_EQ(*policy.PriorityOf("high", Viewer("bob")), 200);
}

TEST(PolicyPriorityTest, DeniedNamesTheCaller) {
  const Policy policy = MustParse(kFullPolicy);
  absl::StatusOr<int> value = policy.PriorityOf("urgent", Submitter("alice"));
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(value.status().message(), HasSubstr("\"alice\""));
  EXPECT_THAT(value.status().message(), HasSubstr("\"urgent\""));
  EXPECT_THAT(value.status().message(), Not(HasSubstr("\n")));
  // "submit" in allowed admits that role, not the roles below it.
  absl::StatusOr<int> viewer = policy.PriorityOf("high", Viewer("vera"));
  EXPECT_EQ(viewer.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(viewer.status().message(), HasSubstr("\"vera\" (role view)"));
}

TEST(PolicyPriorityTest, AdminsMayUseEveryClass) {
  const Policy policy = MustParse(kFullPolicy);
  EXPECT_EQ(*policy.PriorityOf("urgent", Caller{"ops", Role::kAdmin}), 1000);
  EXPECT_EQ(*policy.PriorityOf("high", Caller{"", Role::kAdmin}), 200);
}

TEST(PolicyPriorityTest, AnEmptyNameIsTheDefaultClassAndItsRules) {
  const Policy policy = MustParse(
      "priority_class { name: \"gold\" value: 7 allowed: \"bob\" }\n"
      "default_class: \"gold\"\n");
  EXPECT_EQ(*policy.PriorityOf("", Submitter("bob")), 7);
  EXPECT_EQ(policy.PriorityOf("", Submitter("alice")).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PolicyClassNameTest, TheNameOrTheDefaultClass) {
  const Policy policy = MustParse(kFullPolicy);
  EXPECT_EQ(policy.ClassName(""), "low");
  EXPECT_EQ(policy.ClassName("high"), "high");
  EXPECT_EQ(policy.ClassName("no-such"), "no-such");
}

TEST(PolicyQuotaTest, OwnEntryThenStarThenNone) {
  const Policy policy = MustParse(kFullPolicy);
  const pp::v1::Quota* alice = policy.QuotaOf("alice");
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->owner(), "alice");
  const pp::v1::Quota* bob = policy.QuotaOf("bob");
  ASSERT_NE(bob, nullptr);
  EXPECT_EQ(bob->owner(), "*");
  EXPECT_EQ(bob->max_workers(), 4);
  const Policy only_alice = MustParse("quota { owner: \"alice\" max_workers: 2 }\n");
  ASSERT_NE(only_alice.QuotaOf("alice"), nullptr);
  EXPECT_EQ(only_alice.QuotaOf("alice")->max_workers(), 2);
  EXPECT_EQ(only_alice.QuotaOf("bob"), nullptr);
}

TEST(PolicyLoadTest, AMissingFileIsNamed) {
  absl::StatusOr<Policy> policy = Policy::Load("/nonexistent/policy.txt");
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(policy.status().message(), HasSubstr("--policy=/nonexistent/policy.txt"));
}

TEST(PolicyLoadTest, AFileIsParsedAndItsErrorsNameIt) {
  const std::string path = testing::TempDir() + "/policy_test_policy.txt";
  std::ofstream(path, std::ios::trunc) << kFullPolicy;
  absl::StatusOr<Policy> policy = Policy::Load(path);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(*policy->PriorityOf("urgent", Submitter("carol")), 1000);
  std::ofstream(path, std::ios::trunc) << "\nquota { owner: \"a\" max_workers: -1 }\n";
  policy = Policy::Load(path);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(
      policy.status().message(),
      absl::StrCat("--policy=", path, ":2: quota \"a\": max_workers is -1; it must be 0 or more"));
}

// The policy the secure Kubernetes overlay ships (docs/deploy.md) is one ppcoord accepts, and
// says what the docs say of it.
TEST(PolicyLoadTest, TheSecureOverlaysPolicyLoads) {
  absl::StatusOr<Policy> policy =
      Policy::Load(PP_SOURCE_DIR "/deploy/k8s/overlays/secure/policy.txt");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->ClassName(""), "normal");
  EXPECT_EQ(policy->PriorityOf("high", Submitter("alice")).status().code(),
            absl::StatusCode::kPermissionDenied);
  const pp::v1::Quota* quota = policy->QuotaOf("anyone");
  ASSERT_NE(quota, nullptr);
  EXPECT_EQ(quota->max_workers(), 4);
  EXPECT_EQ(quota->max_queued_jobs(), 10);
  EXPECT_TRUE(quota->borrow());
}

}  // namespace
}  // namespace pp::coordinator
