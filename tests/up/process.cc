#include "tests/up/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace pp::testing_up {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/up-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

void RemoveTree(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    const std::string stat = ReadText(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::optional<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  std::string response;
  if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[65536];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.0 200", 0) != 0 && response.rfind("HTTP/1.1 200", 0) != 0) {
    return std::nullopt;
  }
  return body == std::string::npos ? "" : response.substr(body + 4);
}

Launched::Launched(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& output)
    : output_(output) {
  std::vector<std::string> strings = {binary};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);  // a job of its own, as a shell starts it: Ctrl-C goes to this group
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(fd);
}

Launched::~Launched() {
  if (!status_.has_value()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Anything left means a test already failed. Once the program is gone its orphans are this
  // process's children (a subreaper): only those are killed, never a pid that may be reused.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    bool left = false;
    for (pid_t child : ChildrenOf(getpid())) {
      if (!children_.contains(child)) continue;
      left = true;
      kill(child, SIGKILL);
      waitpid(child, nullptr, WNOHANG);
    }
    if (!left) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void Launched::NoteChildren() {
  if (status_.has_value()) return;
  for (pid_t child : ChildrenOf(pid_)) children_.insert(child);
}

bool Launched::WaitForOutput(const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    NoteChildren();
    if (Output().find(text) != std::string::npos) return true;
    if (WaitExit(absl::ZeroDuration()).has_value()) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

std::optional<int> Launched::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!status_.has_value()) {
    NoteChildren();
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = status;
      break;
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return status_;
}

void BecomeSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::vector<pid_t> ReapAny() {
  std::vector<pid_t> reaped;
  pid_t pid;
  while ((pid = waitpid(-1, nullptr, WNOHANG)) > 0) reaped.push_back(pid);
  return reaped;
}

bool Exists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace pp::testing_up
