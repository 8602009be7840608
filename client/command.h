// ppctl's command table. A command is a name, its positional arguments, a one-line summary, the
// Abseil flags it reads (defined in its own file, client/<command>_command.cc) and a function.
// ppctl parses flags itself, against the command's list, so that `ppctl <command> --help`
// documents exactly that command's flags and every bad argument is one line on stderr with exit
// code 2. To add a command: write client/<name>_command.cc with a factory declared here and add
// it to the table in client/ppctl.cc.
#ifndef PP_CLIENT_COMMAND_H_
#define PP_CLIENT_COMMAND_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pp::client {

struct Command {
  std::string name;
  std::string args;     // positional arguments for the usage line, e.g. "FILE"; empty if none
  std::string summary;  // one line
  std::vector<std::string> flags;  // Abseil flag names, in help order
  // Runs with the positional arguments after the command, flags already set; prints its result
  // on stdout and returns the exit code: 0 ok, 1 failed, 2 bad usage (errors: one stderr line).
  std::function<int(const std::vector<std::string>& args)> run;
  // Help for flags this command shares with another (one Abseil flag, e.g. --format) but reads
  // with its own meaning (its default is then not shown); the flag's own help otherwise.
  std::map<std::string, std::string> flag_help = {};
};

// For commands written against absl::Status: prints a failure as one line "ppctl <command>:
// message" on stderr and returns common::ExitCodeFor(status) (InvalidArgument: 2, other errors:
// 1, OK: 0).
int ExitCode(const std::string& command, const absl::Status& status);

// `ppctl plan`: client/plan_command.cc.
Command PlanCommand();

// `ppctl up`: client/up_command.cc.
Command UpCommand();

// `ppctl train`: client/train_command.cc.
Command TrainCommand();

// `ppctl export` and `ppctl import` (the Hugging Face GPT-2 layout): client/hf_commands.cc.
Command ExportCommand();
Command ImportCommand();

// `ppctl sample`: client/sample_command.cc.
Command SampleCommand();

// `ppctl tokenize`: client/tokenize_command.cc.
Command TokenizeCommand();

// ppctl's main over a command table; returns the process exit code.
int RunPpctl(const std::vector<Command>& commands, int argc, char** argv);

}  // namespace pp::client

#endif  // PP_CLIENT_COMMAND_H_
