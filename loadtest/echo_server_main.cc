// sluice-echo-server: a bare KServe v2 gRPC server that answers ModelInfer with its inputs (see
// loadtest/echo_service.h): no engine, queue or batcher, so that a load test against it measures
// the network path and gRPC alone, the ceiling for any server on the same machine.
//
// It logs "grpc_port=N" once listening (with --grpc-port 0 the port is picked by the kernel),
// then "echo server ready"; SIGTERM or SIGINT stops it (exit 0).

#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "loadtest/echo_service.h"

namespace sluice::loadtest {
namespace {

struct Flags {
  std::string grpc_address = "127.0.0.1";
  int grpc_port = 8011;
  std::string input_name = "INPUT0";
  std::string input_datatype = "FP32";
  std::string input_shape = "-1,-1";
  int64_t max_batch_size = 64;
  int64_t grpc_max_message_bytes = 2147483647;
};

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text) {
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --input-shape '", text, "' (expected e.g. -1,1024)"));
    }
    dims.push_back(dim);
  }
  return dims;
}

int Run(const Flags& flags) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  EchoModelOptions model;
  model.input_name = flags.input_name;
  model.datatype = flags.input_datatype;
  model.max_batch_size = flags.max_batch_size;
  absl::StatusOr<std::vector<int64_t>> dims = ParseDims(flags.input_shape);
  if (!dims.ok()) {
    std::cerr << "error: " << dims.status().message() << "\n";
    return 2;
  }
  model.metadata_shape = *std::move(dims);
  if (absl::Status valid = ValidateEchoModelOptions(model); !valid.ok()) {
    std::cerr << "error: " << valid.message() << "\n";
    return 2;
  }

  EchoService service(model);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string address = absl::StrCat(flags.grpc_address, ":", flags.grpc_port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(flags.grpc_max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(flags.grpc_max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    std::cerr << "error: cannot listen on " << address << " (port in use, or a bad address?)\n";
    return 1;
  }
  // Scripts read this line to find a port picked with --grpc-port 0 (as with sluice-server).
  std::cerr << "sluice-echo-server listening on " << flags.grpc_address << ":" << bound_port
            << " grpc_port=" << bound_port << "\necho server ready" << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cerr << "signal " << signal_number << ": shutting down" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace
}  // namespace sluice::loadtest

int main(int argc, char** argv) {
  // gRPC locks absl::Mutex on every call. Debian's Abseil is built without NDEBUG, so its
  // deadlock detection is on by default: every lock then updates a process-wide lock graph under
  // a global lock (2-4% of the server's CPU at concurrency 1, measured with perf). It checks
  // gRPC's locks, not ours (common::Mutex is a std::mutex); TSan builds check ours.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sluice::loadtest::Flags flags;
  CLI::App app{
      "sluice-echo-server: a KServe v2 gRPC server that returns each request's inputs as its "
      "outputs (INPUTx -> OUTPUTx), for any model name: the network-path ceiling"};
  app.add_option("--grpc-address", flags.grpc_address, "Address to bind")->capture_default_str();
  app.add_option("--grpc-port,--port", flags.grpc_port, "Port; 0 picks a free one (logged)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--input-name", flags.input_name, "Input name the metadata declares")
      ->capture_default_str();
  app.add_option("--input-datatype", flags.input_datatype, "KServe v2 datatype, e.g. FP32")
      ->capture_default_str();
  app.add_option("--input-shape", flags.input_shape,
                 "Input shape as ModelMetadata reports it (-1 = any size; starts with the batch "
                 "dimension -1 when --max-batch-size > 0)")
      ->capture_default_str();
  app.add_option("--max-batch-size", flags.max_batch_size, "Reported by ModelConfig")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--grpc-max-message-bytes", flags.grpc_max_message_bytes,
                 "Largest message received or sent")
      ->check(CLI::Range(int64_t{1024}, int64_t{2147483647}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return sluice::loadtest::Run(flags);
}
