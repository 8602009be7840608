// Runs the real ppctl binary: `ppctl plan` output formats, --help, and bad arguments.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/plan.h"
#include "coordinator/plan/validate.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/client/ppctl_run.h"
#include "tests/coordinator/plan/plan_test_util.h"
#include "worker/data/data.h"

namespace pp::plan {
namespace {

using Result = testing_support::PpctlResult;

Result Ppctl(const std::string& args) { return testing_support::RunPpctl(PPCTL_PATH, args); }

TEST(PpctlTest, HelpDocumentsEveryPlanFlag) {
  const Result help = Ppctl("plan --help");
  EXPECT_EQ(help.code, 0);
  for (const char* flag :
       {"schedule", "stages", "chunks", "microbatches", "costs", "format", "spec", "auto",
        "min_microbatches", "max_microbatches", "memory_budget", "schedules", "max_chunks",
        "mesh_workers", "memory_per_worker", "batch", "layers", "heads", "max_tensor",
        "boundary_bytes", "weight_bytes", "schedule_file"}) {
    EXPECT_NE(help.out.find(absl::StrCat("  --", flag, " (default: ")), std::string::npos)
        << flag << "\n"
        << help.out;
  }
  EXPECT_NE(help.out.find("comm latency per message"), std::string::npos);
  const Result top = Ppctl("--help");
  EXPECT_EQ(top.code, 0);
  EXPECT_NE(top.out.find("  plan "), std::string::npos) << top.out;
  EXPECT_EQ(Ppctl("help plan").out, help.out);
}

TEST(PpctlTest, BadArgumentsAreOneLineAndExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --schedule=bogus", "unknown schedule 'bogus'"},
      {"plan --stages=x", "bad value 'x' for --stages"},
      {"plan --frobnicate=1", "unknown flag --frobnicate"},
      {"plan --costs=f=abc", "'abc' is not a number"},
      {"plan --costs=q=1", "unknown key 'q'"},
      {"plan --format=svg", "--format must be ascii, json, chrome, torch-csv or torch-csv-comms"},
      {"plan --schedule=interleaved-1f1b --stages=4 --microbatches=2", "M >= D"},
      {"plan --stages=0", "D=0 < 1"},
      {"plan --stages=100000 --microbatches=100000", "stage-microbatches is more than"},
      {"plan --costs=f=-1", "cost forward must be a finite number >= 0"},
      {"plan extra", "unexpected argument 'extra'"},
      {"plan --auto --min_microbatches=9 --max_microbatches=3", "is empty"},
      {"plan --auto --mesh_workers=4 --layers=4 --heads=4", "batch must be >= 1, got 0"},
      {"plan --auto --mesh_workers=4 --batch=8 --layers=4 --heads=4 --costs=i=1",
       "i, w and scale are not used with --mesh_workers"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"", "Usage: ppctl"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = Ppctl(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    if (!args.empty()) {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
}

TEST(PpctlTest, JsonIsAValidSchedule) {
  const Result r = Ppctl("plan --schedule=zb-h1 --stages 3 --microbatches=5 --format=json");
  ASSERT_EQ(r.code, 0) << r.err;
  pp::v1::Schedule proto;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &proto).ok()) << r.out;
  EXPECT_EQ(r.out.rfind(R"({"name":"zb-h1","pipeline":3,"chunks":1,"microbatches":5,)", 0), 0u)
      << r.out.substr(0, 200);
  absl::StatusOr<prog::Schedule> schedule = ScheduleFromProto(proto);
  ASSERT_TRUE(schedule.ok());
  EXPECT_TRUE(Validate(*schedule).ok());
  EXPECT_EQ(proto.simulation().makespan(), 5 * 3 + 2 * 1);  // M(f+b) + (D-1)(f+b-2w)
}

// --format=torch-csv writes what --schedule_file reads back; a broken file is one line naming
// the file, line and column.
TEST(PpctlTest, TorchCsvOutAndBackIn) {
  const Result csv = Ppctl("plan --schedule=dualpipe-v --stages=4 --microbatches=10 --format=torch-csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  // Rank 0: DualPipe's 2(D-1) forwards of chunk 0, then one of each chunk (stage 7 is chunk 1).
  EXPECT_EQ(csv.out.rfind("0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,", 0), 0u) << csv.out.substr(0, 80);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 4);
  const std::string path = absl::StrCat(::testing::TempDir(), "/dualpipe-", getpid(), ".csv");
  std::ofstream(path) << csv.out;
  const Result back = Ppctl(absl::StrCat("plan --schedule_file=", path, " --format=json"));
  const Result direct =
      Ppctl("plan --schedule=dualpipe-v --stages=4 --microbatches=10 --format=json");
  ASSERT_EQ(back.code, 0) << back.err;
  // The same programs and simulation; only the name differs.
  EXPECT_EQ(back.out.substr(back.out.find(",\"pipeline\"")),
            direct.out.substr(direct.out.find(",\"pipeline\"")));
  std::ofstream(path) << "0F0,0W0,0I0\r\n";
  const Result broken = Ppctl(absl::StrCat("plan --schedule_file=", path));
  EXPECT_EQ(broken.code, 2);
  EXPECT_NE(broken.err.find(absl::StrCat(path, ": line 1, column 2 ('0W0'): rank 0, action 1")),
            std::string::npos)
      << broken.err;
  std::remove(path.c_str());
  const Result missing = Ppctl("plan --schedule_file=/nonexistent/file.csv");
  EXPECT_EQ(missing.code, 1);  // a failure, not a usage error
  EXPECT_NE(missing.err.find("cannot open /nonexistent/file.csv"), std::string::npos) << missing.err;
}

// interleaved-1f1b D=64 V=4 M=1024: 1,568,768 actions, about 90 MB of JSON. Protobuf's printer
// took 4.3 s for it; the schedule's own writer (client/schedule_json.h) a fraction of a second.
// The bound is on the child's CPU time, not wall time, so a busy machine does not fail it.
TEST(PpctlTest, LargeScheduleJsonIsFast) {
  rusage before, after;
  getrusage(RUSAGE_CHILDREN, &before);
  const absl::Time start = absl::Now();
  const Result r = Ppctl(
      "plan --schedule=interleaved-1f1b --stages=64 --chunks=4 --microbatches=1024 --format=json");
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  getrusage(RUSAGE_CHILDREN, &after);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  const double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) +
                     seconds(after.ru_stime) - seconds(before.ru_stime);
  std::printf("ppctl plan --format=json, interleaved-1f1b D=64 V=4 M=1024: %zu bytes, CPU %.2f s, "
              "wall %.2f s (with the shell and the output file)\n",
              r.out.size(), cpu, wall);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(cpu, 1.5);
  EXPECT_EQ(r.out.rfind(R"({"name":"interleaved-1f1b","pipeline":64,"chunks":4,)", 0), 0u);
  size_t actions = 0;
  for (size_t at = r.out.find(R"({"kind":")"); at != std::string::npos;
       at = r.out.find(R"({"kind":")", at + 1)) {
    ++actions;
  }
  // Per rank and stage-microbatch: F and B, plus a send and a receive at each of S-1 boundaries
  // in each direction: 2*S*M + 4*(S-1)*M.
  EXPECT_EQ(actions, 2u * 256 * 1024 + 4u * 255 * 1024);
  EXPECT_EQ(r.out.substr(r.out.size() - 3), "}}\n");
}

// A job spec is planned as ppcoord plans it, with every rank's memory estimate.
TEST(PpctlTest, SpecPrintsEachRanksMemoryEstimate) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/ppctl-spec-", getpid(), ".json");
  std::ofstream(path) << R"({"name": "m", "model": {"vocabSize": 256, "seqLen": 16, "dModel": 32,
      "nHeads": 4, "nLayers": 4}, "parallel": {"pipeline": 2, "schedule": "gpipe"},
      "train": {"steps": 1, "microbatches": 3, "microbatchSize": 2, "lr": 0.001},
      "data": {"format": "generated", "generatedTokens": 4096}})";
  const Result json = Ppctl(absl::StrCat("plan --spec=", path, " --format=json"));
  ASSERT_EQ(json.code, 0) << json.err;
  pp::v1::PlanJobResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &response).ok()) << json.out;
  EXPECT_EQ(response.schedule().name(), "gpipe");
  ASSERT_EQ(response.stage_layers_size(), 2);
  EXPECT_EQ(response.stage_layers(0), 3);
  EXPECT_EQ(response.stage_layers(1), 3);
  ASSERT_EQ(response.memory_size(), 2);
  for (const pp::v1::RankMemory& m : response.memory()) {
    EXPECT_GT(m.activations(), 0);
    EXPECT_EQ(m.optimizer(), 2 * m.parameters());
    // One checkpoint, at the end: the larger of the step's peak and the checkpoint copies.
    EXPECT_EQ(m.total(), m.baseline() + 4 * m.parameters() + m.scratch() +
                             std::max(m.activations() + m.communication(), m.checkpoint()));
  }
  const Result ascii = Ppctl(absl::StrCat("plan --spec=", path));
  ASSERT_EQ(ascii.code, 0) << ascii.err;
  EXPECT_NE(ascii.out.find("memory per rank"), std::string::npos) << ascii.out;
  EXPECT_NE(ascii.out.find(FormatBytes(response.memory(1).total())), std::string::npos) << ascii.out;
  EXPECT_NE(ascii.out.find("gpipe: D=2 V=1 M=3"), std::string::npos) << ascii.out;
  std::remove(path.c_str());
}

TEST(PpctlTest, AsciiAndChrome) {
  const Result ascii = Ppctl("plan");
  ASSERT_EQ(ascii.code, 0) << ascii.err;
  EXPECT_EQ(ascii.out.rfind("1f1b: D=4 V=1 M=8", 0), 0u) << ascii.out;
  EXPECT_NE(ascii.out.find("\nrank 3: [  ] [  ] [  ] [F1] [B1     ] [F2]"), std::string::npos);
  EXPECT_NE(ascii.out.find("makespan 33, bubble 0.2727"), std::string::npos);

  const Result chrome = Ppctl("plan --schedule=gpipe --stages=2 --microbatches=2 --format=chrome");
  ASSERT_EQ(chrome.code, 0) << chrome.err;
  google::protobuf::Struct trace;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(chrome.out, &trace).ok());
  EXPECT_EQ(trace.fields().at("traceEvents").list_value().values_size(), 2 + 2 * 4 + 2 * 2 * 2);
}

TEST(PpctlTest, AutoPrintsTheComparisonAndTheChoice) {
  const Result r = Ppctl(
      "plan --auto --stages=4 --min_microbatches=4 --max_microbatches=6 --memory_budget=4 "
      "--schedules=gpipe,1f1b,zb-h1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("<- chosen"), std::string::npos) << r.out;
  // Costs are per microbatch at M=4: M=6 has smaller microbatches and the smallest bubble.
  EXPECT_NE(r.out.find("chose zb-h1 V=1 M=6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nzb-h1: D=4 V=1 M=6"), std::string::npos) << r.out;

  const Result json = Ppctl("plan --auto --stages=2 --max_microbatches=3 --format=json");
  ASSERT_EQ(json.code, 0) << json.err;
  pp::v1::Schedule proto;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &proto).ok());
  EXPECT_NE(json.err.find("<- chosen"), std::string::npos);

  const Result none = Ppctl("plan --auto --stages=4 --memory_budget=0.1");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("none of the"), std::string::npos);
}

TEST(PpctlTest, AutoWithMeshWorkersSplitsIntoDataPipelineAndTensor) {
  const std::string mesh =
      "plan --auto --mesh_workers=4 --batch=8 --layers=4 --heads=4 --weight_bytes=1000 "
      "--boundary_bytes=10 --costs=f=1,b=2,act=100";
  // Memory for a quarter of the weights' 4000 bytes (and activations): the model must be split
  // four ways, so no replica.
  const Result r = Ppctl(mesh + " --memory_per_worker=1200");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dp x pp x tp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chose dp1 x pp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one replica's pipeline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nrank 0: "), std::string::npos) << r.out;

  const Result json = Ppctl(mesh + " --format=json");
  ASSERT_EQ(json.code, 0) << json.err;
  pp::v1::Schedule proto;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &proto).ok()) << json.out;
  EXPECT_NE(json.err.find("<- chosen"), std::string::npos);

  const Result none = Ppctl(mesh + " --memory_per_worker=10");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("none of the"), std::string::npos) << none.err;
}

// A spec that packs microbatches (train.tokens_per_microbatch): ppctl reads step 1's lengths
// from the data, prints them, returns them in the JSON and simulates with them as weights
// (docs/planner.md "Packed microbatches"). Newlines end the generated corpus's documents, so the
// rows differ in length.
TEST(PpctlTest, PackedSpecPrintsAndWeighsStepOnesLengths) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/ppctl-packed-", getpid(), ".json");
  std::ofstream(path) << R"({"name": "p", "model": {"vocabSize": 256, "seqLen": 64, "dModel": 32,
      "nHeads": 4, "nLayers": 4, "positions": "document"},
      "parallel": {"pipeline": 2, "schedule": "1f1b"},
      "train": {"steps": 1, "microbatches": 4, "tokensPerMicrobatch": 128, "lr": 0.001},
      "data": {"format": "generated", "generatedTokens": 20000, "documents": "mask",
               "endOfText": 10}})";
  absl::StatusOr<pp::v1::JobSpec> spec = common::LoadJobSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  common::ApplyDefaults(&*spec);
  absl::StatusOr<data::TrainData> data = data::TrainData::Open(*spec);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int64_t> want;
  for (int64_t s = 0; s < 4; ++s) want.push_back(data->RowTokens(s));

  const Result ascii = Ppctl(absl::StrCat("plan --spec=", path));
  ASSERT_EQ(ascii.code, 0) << ascii.err;
  const std::string prefix = "microbatches of step 1: ";
  ASSERT_EQ(ascii.out.rfind(prefix, 0), 0u) << ascii.out;
  const std::string line = ascii.out.substr(0, ascii.out.find('\n'));
  const std::string numbers = line.substr(prefix.size(), line.find(" tokens") - prefix.size());
  std::vector<int64_t> printed;
  for (absl::string_view n : absl::StrSplit(numbers, ' ')) {
    int64_t tokens = 0;
    ASSERT_TRUE(absl::SimpleAtoi(n, &tokens)) << line;
    EXPECT_GE(tokens, 1);
    EXPECT_LE(tokens, 128);
    printed.push_back(tokens);
  }
  EXPECT_EQ(printed, want) << line;
  EXPECT_NE(line.find(" tokens (budget 128, mean "), std::string::npos) << line;
  EXPECT_NE(line.find(", padding to 128 would waste "), std::string::npos) << line;

  const Result json = Ppctl(absl::StrCat("plan --spec=", path, " --format=json"));
  ASSERT_EQ(json.code, 0) << json.err;
  pp::v1::PlanJobResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &response).ok()) << json.out;
  EXPECT_EQ(std::vector<int64_t>(response.microbatch_tokens().begin(),
                                 response.microbatch_tokens().end()),
            want);
  // The simulation is 1F1B's under the weights n_j / 128.
  CostModel costs;
  costs.microbatch_weight = MicrobatchWeights(want, 128);
  EXPECT_EQ(response.schedule().simulation().makespan(),
            MustPlan("1f1b", 2, 1, 4, costs).simulation.makespan);
  EXPECT_LT(response.schedule().simulation().makespan(),
            MustPlan("1f1b", 2, 1, 4).simulation.makespan);

  // --auto: the largest M's microbatches (sequences 0..5) weigh its candidates.
  const Result chosen = Ppctl(absl::StrCat("plan --auto --spec=", path, " --max_microbatches=6"));
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  for (int64_t s = 4; s < 6; ++s) want.push_back(data->RowTokens(s));
  EXPECT_EQ(chosen.out.rfind(absl::StrCat(prefix, absl::StrJoin(want, " "), " tokens"), 0), 0u)
      << chosen.out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pp::plan
