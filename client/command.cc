// RunPpctl: command dispatch, flag parsing against the command's flag list, and --help.
#include "client/command.h"

#include <algorithm>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/daemon_flags.h"
#include "common/exit_code.h"

namespace pp::client {
namespace {

std::string Usage(const std::vector<Command>& commands) {
  std::string out = "Usage: ppctl <command> [flags] [args]\n\nCommands:\n";
  size_t width = 0;
  for (const Command& c : commands) width = std::max(width, c.name.size());
  for (const Command& c : commands) {
    absl::StrAppend(&out, "  ", c.name, std::string(width + 2 - c.name.size(), ' '), c.summary, "\n");
  }
  absl::StrAppend(&out, "\nRun `ppctl <command> --help` for the command's flags.\n");
  return out;
}

// `text` as lines of at most `width` characters, each starting with `indent`.
std::string Wrap(const std::string& text, const std::string& indent, size_t width) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, indent, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, indent, line, "\n");
  return out;
}

std::string CommandHelp(const Command& c) {
  std::string out = absl::StrCat("Usage: ppctl ", c.name, c.flags.empty() ? "" : " [flags]",
                                 c.args.empty() ? "" : " ", c.args, "\n", c.summary, "\n");
  if (!c.flags.empty()) absl::StrAppend(&out, "\nFlags:\n");
  for (const std::string& name : c.flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    const std::string default_value = flag->DefaultValue();
    // A shared flag's default belongs to the other command: this one's help says what it wants.
    if (const auto own = c.flag_help.find(name); own != c.flag_help.end()) {
      absl::StrAppend(&out, "  --", name, "\n", Wrap(own->second, "      ", 90));
      continue;
    }
    absl::StrAppend(&out, "  --", name,
                    " (default: ", default_value.empty() ? "\"\"" : default_value, ")\n",
                    Wrap(flag->Help(), "      ", 90));
  }
  return out;
}

// `--name value` for a non-boolean flag takes the next token as its value.
bool TakesNextToken(const std::string& token) {
  if (token.find('=') != std::string::npos) return false;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(token.substr(2));
  return flag != nullptr && !flag->IsOfType<bool>();
}

}  // namespace

int RunPpctl(const std::vector<Command>& commands, int argc, char** argv) {
  std::vector<std::string> positional, flags;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") {
      for (++i; i < argc; ++i) positional.push_back(argv[i]);
      break;
    }
    if (token == "--help" || token == "-h" || token == "-help") {
      help = true;
    } else if (absl::StartsWith(token, "--")) {
      flags.push_back(token);
      if (TakesNextToken(token) && i + 1 < argc) absl::StrAppend(&flags.back(), "=", argv[++i]);
    } else {
      positional.push_back(token);
    }
  }
  if (!positional.empty() && positional[0] == "help") {
    help = true;
    positional.erase(positional.begin());
  }
  if (positional.empty()) {
    (help ? std::cout : std::cerr) << Usage(commands);
    return help ? pp::common::kExitOk : pp::common::kExitUsage;
  }
  const auto command = std::find_if(commands.begin(), commands.end(),
                                    [&](const Command& c) { return c.name == positional[0]; });
  if (command == commands.end()) {
    std::cerr << "ppctl: unknown command '" << positional[0] << "' (run ppctl --help)\n";
    return pp::common::kExitUsage;
  }
  if (help) {
    std::cout << CommandHelp(*command);
    return pp::common::kExitOk;
  }
  positional.erase(positional.begin());
  // Only the command's own flags: `ppctl <command> --help` lists exactly those.
  auto find_own = [&](absl::string_view name) -> absl::CommandLineFlag* {
    if (std::find(command->flags.begin(), command->flags.end(), name) == command->flags.end()) {
      return nullptr;
    }
    return absl::FindCommandLineFlag(name);
  };
  for (const std::string& flag : flags) {
    bool unused = false;  // a separate value is already joined on: --name=value
    if (absl::Status s = pp::common::SetFlagToken(absl::string_view(flag).substr(2), nullptr,
                                                  &unused, find_own);
        !s.ok()) {
      std::cerr << "ppctl " << command->name << ": " << s.message() << " (see ppctl "
                << command->name << " --help)\n";
      return pp::common::kExitUsage;
    }
  }
  return command->run(positional);
}

int ExitCode(const std::string& command, const absl::Status& status) {
  if (!status.ok()) std::cerr << "ppctl " << command << ": " << status.message() << "\n";
  return pp::common::ExitCodeFor(status);
}

}  // namespace pp::client
