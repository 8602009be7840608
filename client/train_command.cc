// `ppctl train FILE`: trains the job spec FILE in this process with the single-process reference
// trainer (worker/trainer/trainer.h), printing the loss of every step, and with --checkpoint_dir
// writes checkpoints in the layout of common/checkpoint.h. No server; the spec's parallel layout is ignored.
#include <iostream>

#include "absl/flags/flag.h"
#include "client/command.h"
#include "common/exit_code.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "write checkpoints under DIR/<spec name>/step-<N>/ (every checkpoint.everySteps steps "
          "and after the last one); empty: none");
ABSL_FLAG(int32_t, threads, 0, "compute threads; 0: the spec's train.threads (default 1)");

namespace pp::client {

Command TrainCommand() {
  return {"train",
          "FILE",
          "train the job spec FILE in this process (the single-process reference trainer): one "
          "loss line per step",
          {"checkpoint_dir", "threads"},
          [](const std::vector<std::string>& args) {
            if (args.size() != 1) {
              std::cerr << "ppctl train: expected one job spec FILE (see ppctl train --help)\n";
              return common::kExitUsage;
            }
            if (absl::GetFlag(FLAGS_threads) < 0) {
              std::cerr << "ppctl train: --threads must be >= 0, got "
                        << absl::GetFlag(FLAGS_threads) << "\n";
              return common::kExitUsage;
            }
            trainer::TrainOptions options;
            options.threads = absl::GetFlag(FLAGS_threads);
            options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_dir);
            return trainer::TrainMain(args[0], options);
          }};
}

}  // namespace pp::client
