#include "server/listener_watchdog.h"

#include <utility>

#include "common/log.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.grpc.pb.h"

namespace sluice::server {
namespace {

// One probe: a new channel with its own subchannel pool, so the call needs a new connection and
// the listener has to accept it (a shared subchannel would reuse a connection accepted long ago).
// Returns the call's status.
grpc::Status Probe(const ListenerWatchdogOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options.probe_timeout);
  context.set_wait_for_ready(false);
  inference::ServerLiveRequest request;
  inference::ServerLiveResponse response;
  return stub->ServerLive(&context, request, &response);
}

}  // namespace

std::unique_ptr<ListenerWatchdog> ListenerWatchdog::Start(ListenerWatchdogOptions options) {
  std::unique_ptr<ListenerWatchdog> watchdog(new ListenerWatchdog(std::move(options)));
  watchdog->thread_ = std::thread([w = watchdog.get()] { w->Loop(); });
  return watchdog;
}

ListenerWatchdog::ListenerWatchdog(ListenerWatchdogOptions options)
    : options_(std::move(options)) {}

ListenerWatchdog::~ListenerWatchdog() { Stop(); }

void ListenerWatchdog::Stop() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void ListenerWatchdog::Loop() {
  int failures = 0;
  bool accepting = true;
  for (;;) {
    {
      common::MutexLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + options_.interval;
      while (!stop_ && std::chrono::steady_clock::now() < deadline) cv_.WaitUntil(&mu_, deadline);
      if (stop_) return;
    }
    const grpc::Status status = Probe(options_);
    // Only a deadline means nobody accepted: any answer, UNAVAILABLE from a connection closed
    // right after accept included, shows the accept loop runs.
    const bool ok = status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
    failures = ok ? 0 : failures + 1;
    if (accepting && failures >= options_.failures_to_trip) {
      accepting = false;
      LOG_ERROR(options_.logger, "gRPC listener watchdog: ", failures, " consecutive probes of ",
                options_.target, " got no answer within ", options_.probe_timeout.count(),
                " ms (the port no longer accepts connections); liveness is now NOT_SERVING so "
                "that the orchestrator restarts the process");
      if (options_.on_change) options_.on_change(false);
    } else if (!accepting && ok) {
      accepting = true;
      LOG_WARNING(options_.logger, "gRPC listener watchdog: ", options_.target,
                  " answers again; liveness is SERVING");
      if (options_.on_change) options_.on_change(true);
    }
  }
}

}  // namespace sluice::server
