// ppctl: the pipeline service's command-line client. `ppctl --help` lists the commands.
#include "client/command.h"
#include "client/credentials.h"
#include "client/job_commands.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace {

// The server commands of client/job_commands.cc, as table entries. Their usage line is
// "name ARGS...: summary".
std::vector<pp::client::Command> JobCommands() {
  std::vector<pp::client::Command> commands;
  for (const std::string& name : pp::client::JobCommandNames()) {
    pp::client::Command c;
    c.name = name;
    const std::string usage = pp::client::JobCommandUsage(name);
    const size_t colon = usage.find(": ");
    c.summary = colon == std::string::npos ? usage : usage.substr(colon + 2);
    const std::string head = colon == std::string::npos ? name : usage.substr(0, colon);
    for (absl::string_view word : absl::StrSplit(head, ' ', absl::SkipEmpty())) {
      if (word != name && !absl::StartsWith(word, "[--")) {
        absl::StrAppend(&c.args, c.args.empty() ? "" : " ", word);
      }
    }
    c.flags = {"coordinator", "rpc_timeout"};
    c.flags.insert(c.flags.end(), std::begin(pp::client::kCredentialFlags),
                   std::end(pp::client::kCredentialFlags));
    const std::vector<std::string> own = pp::client::JobCommandFlags(name);
    c.flags.insert(c.flags.end(), own.begin(), own.end());
    c.run = [name](const std::vector<std::string>& args) {
      return pp::client::RunJobCommand(name, args);
    };
    commands.push_back(std::move(c));
  }
  return commands;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<pp::client::Command> commands = {pp::client::PlanCommand()};
  for (pp::client::Command& c : JobCommands()) commands.push_back(std::move(c));
  commands.push_back(pp::client::UpCommand());
  commands.push_back(pp::client::TrainCommand());
  commands.push_back(pp::client::ExportCommand());
  commands.push_back(pp::client::ImportCommand());
  commands.push_back(pp::client::SampleCommand());
  commands.push_back(pp::client::TokenizeCommand());
  return pp::client::RunPpctl(commands, argc, argv);
}
