// precision_bench: tokens/s in fp32 and in bf16 (train.precision) on ppctl up's embedded default
// job (4 layers, C=128, T=128, M=8 x B=4 = 4096 tokens a step), for 1 and 2 compute threads:
// - trainer: the single-process reference trainer in this process (worker/trainer), tokens over
//   the wall time of the steps;
// - up: `ppctl up --workers=2 --job=FILE` (D=2, 1f1b) as a child process, its summary's tokens/s
//   (steps 2..N).
// The precisions alternate run by run (fp32, bf16, fp32, bf16, ...) so a noisy neighbour on this
// shared machine hits both alike; each row prints every run and the ratio of the medians.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/up_spec.h"
#include "common/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(int, steps, 30, "steps per run");
ABSL_FLAG(int, rounds, 3, "runs per precision, alternating");
ABSL_FLAG(std::string, threads, "1,2", "compute threads to measure, comma-separated");
ABSL_FLAG(bool, up, true, "also measure ppctl up --workers=2");

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2]
                                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

pp::v1::JobSpec Spec(int pipeline, const char* precision, int threads, int steps) {
  pp::v1::JobSpec spec = pp::client::DefaultUpSpec(2);
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_threads(threads);
  spec.mutable_train()->set_precision(precision);
  spec.mutable_checkpoint()->set_every_steps(0);
  pp::common::ApplyDefaults(&spec);
  return spec;
}

double TrainerRate(const pp::v1::JobSpec& spec) {
  absl::StatusOr<pp::trainer::TrainResult> r = pp::trainer::Train(spec, {});
  if (!r.ok()) {
    std::cerr << "train: " << r.status() << "\n";
    std::exit(1);
  }
  return r->tokens / r->seconds;
}

// Runs `ppctl up --workers=2 --job=<spec>` and reads its summary's tokens/s.
double UpRate(const pp::v1::JobSpec& spec, const std::string& ppctl) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("precision_bench_", getpid());
  std::filesystem::create_directories(dir);
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(spec, &json);
  std::ofstream((dir / "job.json").string()) << json;
  const std::string command = absl::StrCat(ppctl, " up --workers=2 --job=", (dir / "job.json").string(),
                                           " --data_dir=", (dir / "data").string(), " 2>&1");
  FILE* out = popen(command.c_str(), "r");
  double rate = 0;
  char line[4096];
  std::string output;
  while (out != nullptr && std::fgets(line, sizeof(line), out) != nullptr) {
    output += line;
    std::sscanf(line, " tokens/s %lf", &rate);
  }
  const int status = out == nullptr ? -1 : pclose(out);
  std::filesystem::remove_all(dir);
  if (status != 0 || rate <= 0) {
    std::cerr << command << " failed (status " << status << "):\n" << output;
    std::exit(1);
  }
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tokens/s of fp32 and bf16 on ppctl up's default job");
  absl::ParseCommandLine(argc, argv);
  const std::string ppctl =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "ppctl").string();
  const int steps = absl::GetFlag(FLAGS_steps), rounds = absl::GetFlag(FLAGS_rounds);
  std::vector<int> thread_counts;
  for (const std::string& t :
       std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_threads), ','))) {
    thread_counts.push_back(std::stoi(t));
  }
  std::printf("%-8s %7s  %-32s %-32s %s\n", "mode", "threads", "fp32 tok/s (runs)",
              "bf16 tok/s (runs)", "bf16/fp32 (medians)");
  for (const char* mode : {"trainer", "up"}) {
    if (std::string(mode) == "up" && !absl::GetFlag(FLAGS_up)) continue;
    for (int threads : thread_counts) {
      std::vector<double> rate[2];
      for (int r = 0; r < rounds; ++r) {
        for (int p = 0; p < 2; ++p) {
          const char* precision = p == 0 ? "fp32" : "bf16";
          const bool up = std::string(mode) == "up";
          const pp::v1::JobSpec spec = Spec(up ? 2 : 1, precision, threads, steps);
          rate[p].push_back(up ? UpRate(spec, ppctl) : TrainerRate(spec));
        }
      }
      auto runs = [](const std::vector<double>& v) {
        std::string s;
        for (double x : v) absl::StrAppend(&s, s.empty() ? "" : " ", absl::StrFormat("%.0f", x));
        return s;
      };
      std::printf("%-8s %7d  %-32s %-32s %.3f\n", mode, threads, runs(rate[0]).c_str(),
                  runs(rate[1]).c_str(), Median(rate[1]) / Median(rate[0]));
      std::fflush(stdout);
    }
  }
  return 0;
}
