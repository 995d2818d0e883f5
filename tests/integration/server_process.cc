#include "tests/integration/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice::testing {

namespace {

// `variable` from the environment when set and not empty, else `built_in`.
std::string FromEnvironment(const char* variable, const char* built_in) {
  const char* value = getenv(variable);
  return value != nullptr && *value != '\0' ? value : built_in;
}

}  // namespace

// Overridable for test binaries run away from their build tree (scripts/gpu-check.sh packs the
// server and the bundled models next to the GPU tests).
std::string ServerBinary() {
  return FromEnvironment("SLUICE_TEST_SERVER_BINARY", SLUICE_SERVER_BINARY);
}
std::string BundledModelRepository() {
  return FromEnvironment("SLUICE_TEST_MODEL_REPOSITORY", SLUICE_SOURCE_DIR "/models");
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(std::vector<std::string> args,
                                                                    std::chrono::seconds timeout,
                                                                    int fd_limit) {
  static std::atomic<int> counter{0};
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "sluice_server_", getpid(), "_", counter++, ".log");
  std::vector<std::string> argv = {ServerBinary()};
  // gRPC and HTTP on free loopback ports, so that servers started in parallel never collide on
  // 8001 and 8000; unless `args` names its own (CLI11 refuses a flag given twice).
  auto given = [&](const std::string& flag) {
    for (const std::string& a : args) {
      if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
    }
    return false;
  };
  if (!given("--grpc-address")) argv.push_back("--grpc-address=127.0.0.1");
  if (!given("--grpc-port")) argv.push_back("--grpc-port=0");
  if (!given("--http-address")) argv.push_back("--http-address=127.0.0.1");
  if (!given("--http-port")) argv.push_back("--http-port=0");
  argv.insert(argv.end(), args.begin(), args.end());
  // The child's environment, built before fork(): ours plus SLUICE_METRICS_PORT=0 unless set.
  std::vector<char*> c_env;
  for (char** e = environ; *e != nullptr; ++e) c_env.push_back(*e);
  std::string metrics_port_env = "SLUICE_METRICS_PORT=0";
  if (getenv("SLUICE_METRICS_PORT") == nullptr) c_env.push_back(metrics_port_env.data());
  c_env.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    if (fd_limit > 0) {
      const rlimit limit{static_cast<rlim_t>(fd_limit), static_cast<rlim_t>(fd_limit)};
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }

  std::unique_ptr<ServerProcess> process(new ServerProcess(pid, log_path));
  const std::regex port_re("grpc_port=([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->exited_ = true;
      return absl::FailedPreconditionError(absl::StrCat(
          "sluice-server exited during start-up (status ", status, "):\n", process->Log()));
    }
    const std::string log = process->Log();
    std::smatch match;
    if (process->port_ == 0 && std::regex_search(log, match, port_re)) {
      process->port_ = std::stoi(match[1]);
    }
    // "server started, not ready": start-up is done, but a model failed (--strict-readiness).
    if (process->port_ != 0 && (log.find("server ready") != std::string::npos ||
                                log.find("server started, not ready") != std::string::npos)) {
      // The metrics line comes before "server ready" when metrics are on.
      static const std::regex metrics_re("metrics_port=([0-9]+)");
      if (std::regex_search(log, match, metrics_re)) process->metrics_port_ = std::stoi(match[1]);
      static const std::regex http_re("http_port=([0-9]+)");
      if (std::regex_search(log, match, http_re)) process->http_port_ = std::stoi(match[1]);
      return process;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("sluice-server did not get ready in time:\n", process->Log()));
}

namespace {

// A sanitizer report in the server's log (scripts/sanitize.sh builds): each sanitizer ends its
// report with "SUMMARY: <Name>Sanitizer"; UBSan's lines say "runtime error:".
bool HasSanitizerReport(const std::string& log) {
  static const std::regex report_re(
      "SUMMARY: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer|"
      "ERROR: [A-Za-z]+Sanitizer|: runtime error: ");
  return std::regex_search(log, report_re);
}

}  // namespace

ServerProcess::~ServerProcess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Most tests end the server here with SIGKILL, so its exit status says nothing; a report it
  // wrote while the test ran is in its log. Fail the test that started it, whatever the test
  // checked (reports are fatal in sanitizer builds, so the report is the last thing logged).
  const std::string log = Log();
  if (HasSanitizerReport(log)) {
    ADD_FAILURE() << "sanitizer report in sluice-server (pid " << pid_ << "):\n" << log;
  }
  unlink(log_path_.c_str());
}

std::string ServerProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::StatusOr<int> ServerProcess::Stop(std::chrono::seconds timeout, int signal) {
  if (exited_) return absl::FailedPreconditionError("already stopped");
  kill(pid_, signal);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("sluice-server did not exit in time");
}

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace sluice::testing
