// `ppctl train` (the real binary): one loss line per step, the reference trainer's losses, and
// checkpoints in the layout of docs/recovery.md holding the trainer's final weights; bad input is one line.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/process.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::CommandResult;
using ::pp::testing_support::RunCommand;
using ::testing::HasSubstr;

class TrainCommandTest : public IntegrationTest {
 protected:
  std::string ppctl() const { return std::string(PP_BIN_DIR) + "/ppctl"; }
};

TEST_F(TrainCommandTest, PrintsEachStepsLossAndWritesCheckpoints) {
  constexpr int kSteps = 6;
  pp::v1::JobSpec spec = TinySpec("zb-v", 2, kSteps);  // the layout is not used
  spec.mutable_checkpoint()->set_every_steps(3);
  const std::string file = WriteSpec(spec, "job.json");
  const std::string root = (dir_ / "checkpoints").string();
  absl::StatusOr<CommandResult> run =
      RunCommand({ppctl(), "train", file, "--checkpoint_dir=" + root}, absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->err;

  common::ApplyDefaults(&spec);
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, {});
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<std::string> printed;
  for (absl::string_view line : absl::StrSplit(run->out, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "step ")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_GE(words.size(), 4u) << line;
    EXPECT_EQ(words[1], absl::StrFormat("%d/%d", printed.size() + 1, kSteps)) << line;
    EXPECT_EQ(words[2], "loss") << line;
    printed.push_back(words[3]);
  }
  ASSERT_EQ(printed.size(), static_cast<size_t>(kSteps)) << run->out;
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_EQ(printed[k], absl::StrFormat("%.6f", reference->losses[k])) << "step " << k + 1;
  }
  EXPECT_GT(reference->losses.front(), reference->losses.back());  // it learns

  absl::StatusOr<std::vector<int>> steps = common::ListCommittedSteps(root, spec.name());
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, (std::vector<int>{6, 3}));
  absl::StatusOr<common::Checkpoint> last =
      common::LoadCheckpoint(common::StepDir(root, spec.name(), kSteps));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->manifest.step(), kSteps);
  // Model tensors plus two AdamW moments each.
  EXPECT_EQ(last->tensors.size(), 3 * reference->weights.size());
  for (const auto& [name, values] : reference->weights) {
    ASSERT_EQ(last->tensors.count(name), 1u) << name;
    const std::vector<float>& saved = last->tensors.at(name).data;
    ASSERT_EQ(saved.size(), values.size()) << name;
    EXPECT_EQ(std::memcmp(saved.data(), values.data(), values.size() * sizeof(float)), 0) << name;
    EXPECT_EQ(last->tensors.count(common::ExpAvgName(name)), 1u) << name;
    EXPECT_EQ(last->tensors.count(common::ExpAvgSqName(name)), 1u) << name;
  }
}

TEST_F(TrainCommandTest, BadInputIsOneLineAndANonZeroExit) {
  pp::v1::JobSpec bad_heads = TinySpec("1f1b", 1, 2);
  bad_heads.mutable_model()->set_n_heads(5);
  pp::v1::JobSpec no_data = TinySpec("1f1b", 1, 2);
  no_data.mutable_data()->set_path((dir_ / "missing.txt").string());
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"train"}, 2, "FILE"},
      {{"train", (dir_ / "nope.json").string()}, 1, "nope.json"},
      {{"train", WriteSpec(bad_heads, "heads.json")}, 1, "model.n_heads"},
      {{"train", WriteSpec(no_data, "data.json")}, 1, "missing.txt"},
      {{"train", WriteSpec(bad_heads, "threads.json"), "--threads=-1"}, 2, "--threads"},
      {{"train", WriteSpec(bad_heads, "flag.json"), "--no_such_flag=1"}, 2, "no_such_flag"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {ppctl()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(absl::StrJoin(argv, " "));
    absl::StatusOr<CommandResult> run = RunCommand(argv, absl::Seconds(20));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->exit_code, c.exit_code) << run->err;
    EXPECT_THAT(run->err, HasSubstr(c.says));
    EXPECT_EQ(std::count(run->err.begin(), run->err.end(), '\n'), 1) << run->err;
    EXPECT_EQ(run->out, "");
  }
}

}  // namespace
}  // namespace pp::integration
