// Hostile network clients against the real server process (issue 17, items 1, 4 and 6): a
// connection burst past the fd limit, a gRPC listener that stops accepting, slow HTTP clients on
// the metrics port, and ModelStreamInfer clients that never read their answers. Loopback only;
// every test is bounded in time and in the connections and memory it uses.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/tensor_codec.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
using testing::HttpGet;
using testing::ServerProcess;

// A blocking TCP connection to 127.0.0.1:port; -1 on failure.
int ConnectTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closed `fd` (EOF or reset) within `wait`.
bool ClosedByPeer(int fd, std::chrono::milliseconds wait) {
  pollfd entry{fd, POLLIN, 0};
  if (poll(&entry, 1, static_cast<int>(wait.count())) <= 0) return false;
  char byte = 0;
  return recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

// ServerLive over a new connection (its own subchannel pool), with a deadline.
grpc::Status CallServerLive(const std::string& address, std::chrono::milliseconds deadline) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  inference::ServerLiveRequest request;
  inference::ServerLiveResponse response;
  return stub->ServerLive(&context, request, &response);
}

// VmRSS of `pid` in bytes (0 if unreadable).
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

bool WaitForLog(const ServerProcess& server, const std::string& text,
                std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (server.Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Item 1: ~1,015 idle connections against a soft limit of 1,024 made one accept4 fail with
// EMFILE, and gRPC 1.51's listener never accepted again. Here the limit is 256 (soft and hard)
// and 400 connections arrive at once: the server must refuse the excess and, once they are
// gone, accept and answer again.
TEST(ConnectionBurstTest, PortAcceptsAgainAfterABurstPastTheFdLimit) {
  auto server = ServerProcess::Start({}, std::chrono::seconds(30), /*fd_limit=*/256);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE((*server)->Log().find("fd limit (RLIMIT_NOFILE): soft 256 -> 256, hard 256"),
            std::string::npos)
      << (*server)->Log();
  std::vector<int> burst;
  for (int i = 0; i < 400; ++i) {
    const int fd = ConnectTcp((*server)->port());
    if (fd >= 0) burst.push_back(fd);
  }
  EXPECT_GT(burst.size(), 300u);
  // Give the listener time to accept (and refuse) the whole backlog.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int refused = 0;
  for (int fd : burst) refused += ClosedByPeer(fd, std::chrono::milliseconds(0)) ? 1 : 0;
  for (int fd : burst) close(fd);
  EXPECT_GT(refused, 100) << "connections past the descriptor ceiling are closed at once";
  // The server closes its side of the burst's connections asynchronously.
  grpc::Status status;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  do {
    status = CallServerLive((*server)->address(), std::chrono::milliseconds(1000));
  } while (!status.ok() && Clock::now() < deadline);
  EXPECT_TRUE(status.ok()) << "the gRPC port no longer accepts after the burst: "
                           << status.error_message() << "\n"
                           << (*server)->Log();
  EXPECT_EQ((*server)->Log().find("Failed accept4"), std::string::npos) << (*server)->Log();
}

// Item 1: the configurable cap refuses connections well before the fd limit, and the server
// keeps serving the connections it holds.
TEST(ConnectionBurstTest, ConnectionsPastTheCapAreClosedAtOnce) {
  auto server = ServerProcess::Start({"--grpc-max-connections=40"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  auto live = [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    inference::ServerLiveRequest request;
    inference::ServerLiveResponse response;
    return stub->ServerLive(&context, request, &response);
  };
  ASSERT_TRUE(live().ok());
  std::vector<int> burst;
  for (int i = 0; i < 100; ++i) {
    const int fd = ConnectTcp((*server)->port());
    if (fd >= 0) burst.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int refused = 0;
  for (int fd : burst) refused += ClosedByPeer(fd, std::chrono::milliseconds(0)) ? 1 : 0;
  EXPECT_GE(refused, 55) << "of 100 connections over a cap of 40";
  EXPECT_LE(refused, 95);
  EXPECT_TRUE(live().ok()) << "an established connection keeps working";
  for (int fd : burst) close(fd);
}

// Item 1: a listener that no longer accepts (broken here by the test-only hook, as EMFILE broke
// it before) is found by the watchdog, which turns liveness false and says so.
TEST(ListenerWatchdogTest, DeadListenerTurnsLivenessFalseWithALogLine) {
  setenv("SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER", "0", 1);
  auto server =
      ServerProcess::Start({"--grpc-watchdog-interval-ms=100", "--grpc-watchdog-timeout-ms=300",
                            "--grpc-watchdog-failures=2"});
  unsetenv("SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER");
  ASSERT_TRUE(server.ok()) << server.status();
  const auto start = Clock::now();
  EXPECT_TRUE(WaitForLog(**server, "liveness is now NOT_SERVING", std::chrono::seconds(5)))
      << (*server)->Log();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  // The port really is dead: a call on a new connection gets no answer.
  EXPECT_EQ(CallServerLive((*server)->address(), std::chrono::milliseconds(300)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // HTTP liveness follows the same watchdog, so a probe on either protocol restarts the process.
  ASSERT_GT((*server)->http_port(), 0);
  const sluice::testing::HttpResponse live =
      sluice::testing::HttpGet((*server)->http_port(), "/v2/health/live");
  EXPECT_EQ(live.status, 400) << live.body;
  EXPECT_NE(live.body.find("gRPC listener stopped accepting"), std::string::npos) << live.body;
}

// Item 1: a healthy server's watchdog never trips, a connection flood over the cap included
// (refused connections answer at once, which shows the accept loop runs).
TEST(ListenerWatchdogTest, HealthyOrCappedListenerKeepsLiveness) {
  auto server =
      ServerProcess::Start({"--grpc-watchdog-interval-ms=50", "--grpc-watchdog-timeout-ms=500",
                            "--grpc-watchdog-failures=1", "--grpc-max-connections=20"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> burst;
  for (int i = 0; i < 60; ++i) {
    const int fd = ConnectTcp((*server)->port());
    if (fd >= 0) burst.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  for (int fd : burst) close(fd);
  EXPECT_EQ((*server)->Log().find("NOT_SERVING"), std::string::npos) << (*server)->Log();
}

// Item 6: civetweb gave each of its two workers to one connection until its request arrived or
// 30 s passed, so two half-sent requests stalled every scrape for 30 s.
TEST(MetricsSlowClientTest, HalfSentRequestsDoNotStallScrapes) {
  auto server = ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  ASSERT_GT(port, 0);
  auto half_sent = [&](int count) {
    std::vector<int> fds;
    for (int i = 0; i < count; ++i) {
      const int fd = ConnectTcp(port);
      if (fd < 0) continue;
      const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
      send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    return fds;
  };
  // Two slow clients (the issue's case): a scrape is answered at once.
  std::vector<int> slow = half_sent(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = Clock::now();
  EXPECT_EQ(HttpGet(port, "/metrics").status, 200);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000));
  // As many slow clients as workers: the request timeout (2 s) frees the workers.
  std::vector<int> more = half_sent(8);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  start = Clock::now();
  EXPECT_EQ(HttpGet(port, "/metrics").status, 200);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(3500));
  for (int fd : slow) close(fd);
  for (int fd : more) close(fd);
}

// A repository with "big": identity on 64 Ki float32 (256 KiB answers).
class BigModelRepository {
 public:
  BigModelRepository() {
    root_ = std::filesystem::temp_directory_path() / absl::StrCat("sluice-net-", getpid());
    std::filesystem::create_directories(root_ / "big" / "1");
    std::ofstream(root_ / "big" / "config.pbtxt") << R"(
      backend: "identity"
      max_batch_size: 0
      input [ { name: "IN" data_type: TYPE_FP32 dims: [ 65536 ] } ]
      output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 65536 ] } ]
    )";
  }
  ~BigModelRepository() { std::filesystem::remove_all(root_); }
  std::string path() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

// Item 4: ModelStreamInfer clients that send and never read. The server held up to 512 answers
// per stream whatever their size (two such streams of 256 KiB answers: 256 MiB and more); with
// --grpc-max-stream-pending-bytes it stops reading once a stream holds that many bytes.
TEST(StreamBackpressureTest, PendingAnswersAreBoundedInBytes) {
  BigModelRepository repository;
  std::vector<std::string> args = {"--model-repository=" + repository.path()};
  // SLUICE_TEST_NO_BYTE_BOUNDS=1 leaves the byte flags out, to record a server without them
  // (the "before" figure in docs/reliability.md).
  if (std::getenv("SLUICE_TEST_NO_BYTE_BOUNDS") == nullptr) {
    args.push_back("--grpc-max-stream-pending-bytes=4194304");
    args.push_back("--grpc-max-pending-stream-bytes-total=16777216");
  }
  auto server = ServerProcess::Start(args);
  ASSERT_TRUE(server.ok()) << server.status();
  inference::ModelInferRequest request;
  request.set_model_name("big");
  ASSERT_TRUE(client::AddInput(request, "IN", {65536}, std::vector<float>(65536, 1.f)).ok());

  const int64_t before = ResidentBytes((*server)->pid());
  constexpr int kStreams = 2;
  constexpr int kMessagesPerStream = 600;
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<
        grpc::ClientReaderWriter<inference::ModelInferRequest, inference::ModelStreamInferResponse>>
        call;
    std::thread writer;
    std::atomic<int> written{0};
  };
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int s = 0; s < kStreams; ++s) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    channels.push_back(
        grpc::CreateCustomChannel((*server)->address(), grpc::InsecureChannelCredentials(), args));
    auto stub = inference::GRPCInferenceService::NewStub(channels.back());
    auto stream = std::make_unique<Stream>();
    stream->call = stub->ModelStreamInfer(&stream->context);
    Stream* raw = stream.get();
    // Writes block once flow control stops them; the context's cancel below unblocks them.
    raw->writer = std::thread([raw, &request] {
      for (int i = 0; i < kMessagesPerStream; ++i) {
        if (!raw->call->Write(request)) return;
        raw->written.fetch_add(1);
      }
    });
    streams.push_back(std::move(stream));
  }
  // Long enough for the server to read, answer and pile up whatever it is going to.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int64_t growth = ResidentBytes((*server)->pid()) - before;
  int written = 0;
  for (auto& stream : streams) written += stream->written.load();
  for (auto& stream : streams) stream->context.TryCancel();
  for (auto& stream : streams) stream->writer.join();
  std::printf("streams %d, requests written %d, server RSS growth %.1f MiB\n", kStreams, written,
              static_cast<double>(growth) / (1 << 20));
  // 2 streams x 4 MiB held, plus what gRPC buffers per connection (flow-control windows).
  // Sanitizer builds keep freed memory in quarantine, so resident growth is not checked there
  // (CMakeLists.txt, SLUICE_SANITIZER_BUILD); the release suite checks it.
#ifndef SLUICE_SANITIZER_BUILD
  EXPECT_LT(growth, int64_t{80} << 20) << "the server held more than its byte bounds allow";
#endif
  // It still serves.
  EXPECT_TRUE(CallServerLive((*server)->address(), std::chrono::seconds(2)).ok());
}

}  // namespace
}  // namespace sluice
