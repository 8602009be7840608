// ppctl's server commands: submit, get, list, queue, watch, cancel, resume, workers, trace,
// report (client/report_command.h), logs (client/logs_command.h).
// Contract: RunJobCommand(command, args) talks to ppcoord at --coordinator (Abseil flags, parsed by
// ppctl's main before the call; `args` are the positional arguments after the command) and returns
// the process exit code: 0 on success (for watch: the job SUCCEEDED), 1 when the server refuses or
// the job did not succeed, 2 for a usage error. Errors are one line on stderr. An unreachable
// coordinator is reported within --rpc_timeout.
#ifndef PP_CLIENT_JOB_COMMANDS_H_
#define PP_CLIENT_JOB_COMMANDS_H_

#include <string>
#include <vector>

namespace pp::client {

// The commands RunJobCommand knows, in help order.
std::vector<std::string> JobCommandNames();

// One line of usage for `command` (e.g. "trace JOB [--step=N] [--format=ascii|chrome|json]: ...");
// empty for an unknown command.
std::string JobCommandUsage(const std::string& command);

// The command's own flags beyond --coordinator and --rpc_timeout, in help order.
std::vector<std::string> JobCommandFlags(const std::string& command);

int RunJobCommand(const std::string& command, const std::vector<std::string>& args);

}  // namespace pp::client

#endif  // PP_CLIENT_JOB_COMMANDS_H_
