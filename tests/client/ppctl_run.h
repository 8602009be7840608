// Runs the ppctl binary from a test and reads back what it printed.
#ifndef PP_TESTS_CLIENT_PPCTL_RUN_H_
#define PP_TESTS_CLIENT_PPCTL_RUN_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pp::testing_support {

struct PpctlResult {
  int code = -1;  // -1: killed by a signal (a crash)
  std::string out, err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `ppctl` with `args`; `env` ("KEY=VALUE ...", may be empty) goes in front, as a shell reads it.
inline PpctlResult RunPpctl(const std::string& ppctl, const std::string& args,
                            const std::string& env = "") {
  // ctest runs the tests of a file as parallel processes: each call gets its own files.
  static int calls = 0;
  const std::string base = absl::StrCat(::testing::TempDir(), "/ppctl-", getpid(), "-", calls++);
  const std::string out = base + ".out", err = base + ".err";
  const std::string command = absl::StrCat(env, " ", ppctl, " ", args, " >", out, " 2>", err);
  const int status = std::system(command.c_str());
  PpctlResult result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = Slurp(out);
  result.err = Slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return result;
}

}  // namespace pp::testing_support

#endif  // PP_TESTS_CLIENT_PPCTL_RUN_H_
