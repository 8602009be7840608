// `ppctl train FILE`: trains the job spec FILE in this process with the single-process reference
// trainer (worker/trainer/trainer.h), printing the loss of every step, and with --checkpoint_dir
// writes checkpoints in the layout of common/checkpoint.h. No server; the spec's parallel layout is
// ignored. --device picks the backend (TrainOptions::device: the CPU, or GPU N through the CUDA
// plugin); --losses writes every step's loss exactly, for bitwise comparisons in scripts
// (tests/gpu/run.sh), which the printed 6 decimals cannot give.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/command.h"
#include "common/device.h"
#include "common/exit_code.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "write checkpoints under DIR/<spec name>/step-<N>/ (every checkpoint.everySteps steps "
          "and after the last one); empty: none");
ABSL_FLAG(int32_t, threads, 0, "compute threads; 0: the spec's train.threads (default 1)");
// Shared with `ppctl up` (client/up_command.cc), which reads it as the workers' device.
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda:N to train on GPU N through the CUDA plugin libpp_cuda.so "
          "(docs/model.md); a missing plugin or GPU is an error, never a fallback to the CPU");
ABSL_FLAG(std::string, losses, "",
          "also write FILE with one line per step, `STEP LOSS`, the loss exact (%.17g, which "
          "reads back as the same double); empty: none");

namespace pp::client {
namespace {

int RunTrain(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "ppctl train: expected one job spec FILE (see ppctl train --help)\n";
    return common::kExitUsage;
  }
  if (absl::GetFlag(FLAGS_threads) < 0) {
    std::cerr << "ppctl train: --threads must be >= 0, got " << absl::GetFlag(FLAGS_threads)
              << "\n";
    return common::kExitUsage;
  }
  // Checked before the spec is read, so a typo is a usage error and not a failed run.
  const std::string device = absl::GetFlag(FLAGS_device);
  if (absl::StatusOr<common::Device> parsed = common::ParseDevice(device, "device"); !parsed.ok()) {
    std::cerr << "ppctl train: " << parsed.status().message() << "\n";
    return common::kExitUsage;
  }
  trainer::TrainOptions options;
  options.device = device;
  options.threads = absl::GetFlag(FLAGS_threads);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_dir);
  options.losses_path = absl::GetFlag(FLAGS_losses);
  return trainer::TrainMain(args[0], options);
}

}  // namespace

Command TrainCommand() {
  return {"train",
          "FILE",
          "train the job spec FILE in this process (the single-process reference trainer): one "
          "loss line per step",
          {"device", "checkpoint_dir", "threads", "losses"},
          RunTrain};
}

}  // namespace pp::client
