#include "server/main/grpc_server_builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/pem_file.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/grpc_service.h"
#include "server/main/server_flags.h"
#include "server/process_wide_accept_guard.h"
#include "server/process_wide_reset_guard.h"
#include "server/serving_state.h"

namespace sluice::server {
namespace {

// Plaintext, TLS (--tls-cert/--tls-key) or mutual TLS (and --tls-ca).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerFlags& flags) {
  if (flags.tls_cert.empty() && flags.tls_key.empty()) {
    if (!flags.tls_ca.empty()) {
      return absl::InvalidArgumentError("--tls-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (flags.tls_cert.empty() || flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together (give both)");
  }
  grpc::SslServerCredentialsOptions ssl(
      flags.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                           : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, common::ReadPemFile("--tls-cert", flags.tls_cert));
  ASSIGN_OR_RETURN(pair.private_key, common::ReadPemFile("--tls-key", flags.tls_key));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!flags.tls_ca.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadPemFile("--tls-ca", flags.tls_ca));
  }
  return grpc::SslServerCredentials(ssl);
}

// Descriptors open now (lowest-first numbering: the first free number).
int OpenDescriptorCount() {
  const int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe < 0) return 0;
  close(probe);
  return probe;
}

// Message sizes, compressed requests and the transport's memory.
void SetMessageLimits(const ServerFlags& flags, common::Logger* log, grpc::ServerBuilder& builder) {
  // Compressed requests: gRPC 1.51 inflates a whole message before it applies the size limit
  // (a 1 MiB gzip message inflated to 1.7 GB), so by default only uncompressed ones are accepted:
  // with gzip and deflate disabled, a call that names either is refused UNIMPLEMENTED when its
  // headers arrive, before its message is read. Identity cannot be disabled.
  int64_t max_receive_bytes = flags.grpc_max_message_bytes;
  if (flags.grpc_allow_compressed_requests) {
    // Deflate's largest ratio is 1032:1, so this bounds what any accepted message inflates to.
    max_receive_bytes = std::min(max_receive_bytes, flags.grpc_max_inflated_message_bytes / 1032);
    LOG_INFO_WAITING(log, "compressed requests allowed: requests limited to ", max_receive_bytes,
                     " bytes (--grpc-max-inflated-message-bytes=",
                     flags.grpc_max_inflated_message_bytes, " / 1032)");
  } else {
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_receive_bytes));
  // Everything gRPC's transport holds (read/write buffers, call arenas) counts against one quota:
  // near it gRPC refuses new connections and cancels the streams holding the most, instead of
  // growing until the kernel kills the process (slow readers, rapid reset floods). The builder
  // takes its own reference to the quota.
  grpc::ResourceQuota quota("sluice-grpc");
  quota.Resize(static_cast<size_t>(flags.grpc_memory_quota_bytes));
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(static_cast<int>(flags.grpc_max_message_bytes));
}

// Connection policy, set explicitly rather than left to gRPC's defaults (unlimited streams per
// connection; no server pings): a bound on what one connection can hold open, dead peers
// detected, and clients that ping abusively disconnected.
void SetConnectionPolicy(const ServerFlags& flags, grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, flags.grpc_max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, flags.grpc_keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, flags.grpc_keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             flags.grpc_min_client_ping_interval_ms);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  // No deadline timer of gRPC's own on the server: the engine expires a request at its deadline
  // and the call is finished once, by the application. gRPC 1.51's server deadline filter ends
  // an expired stream itself (trailers-only DEADLINE_EXCEEDED + RST_STREAM, chttp2
  // close_from_api), and the Finish() every callback call still needs then fails on the closed
  // stream, cancels the call again and makes close_from_api write a second trailers + RST_STREAM:
  // HEADERS after END_STREAM (RFC 9113 5.1), on 8,656 of 10,000 calls with a 1 us grpc-timeout
  // (issue 37). Answering before the deadline (kAnswerBeforeGrpcDeadline) cannot win that race
  // when the deadline has passed on arrival. Clients still enforce their own deadlines (a
  // cancelled call reaches the reactors' OnCancel as before).
  builder.AddChannelArgument(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 0);
  // With its bandwidth-delay probe gRPC grows every stream's receive window whether or not the
  // application reads, so a client that never reads its answers could park tens of MiB of
  // requests per stream in gRPC beyond --grpc-max-connection-pending-bytes (4 streams: +143 MiB
  // on loopback, issue 37). Off, a stream's window is 64 KiB plus what a pending read asks for,
  // and flow control holds the client once the stream stops reading.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, flags.grpc_bdp_probe ? 1 : 0);
}

// The connection cap (process_wide_accept_guard.h): a descriptor ceiling below the fd limit,
// and accept errors that no longer stop gRPC's listener; and the rapid-reset limit
// (process_wide_reset_guard.h). Process-wide: set before the listener accepts.
void ConfigureConnectionGuards(const ServerFlags& flags, rlim_t fd_limit, common::Logger* log) {
  AcceptGuardOptions guard;
  {
    const int64_t reserve_ceiling = static_cast<int64_t>(fd_limit) - 64;
    const int64_t cap_ceiling = flags.grpc_max_connections > 0
                                    ? int64_t{OpenDescriptorCount()} + flags.grpc_max_connections
                                    : reserve_ceiling;
    guard.fd_ceiling = static_cast<int>(
        std::clamp<int64_t>(std::min(reserve_ceiling, cap_ceiling), 16, int64_t{1} << 30));
  }
  if (const char* value = std::getenv("SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER");
      value != nullptr && *value != '\0') {
    guard.break_listener_after_accepts_for_test = std::atoll(value);
    LOG_WARNING(log, "TEST-ONLY: the gRPC listener will be broken after ",
                guard.break_listener_after_accepts_for_test,
                " connections (SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER); never set this in "
                "production");
  }
  ResetGuardOptions reset_guard;
  reset_guard.max_resets_per_second = flags.grpc_max_resets_per_second;
  ConfigureResetGuard(reset_guard);
  ConfigureAcceptGuard(guard);
  LOG_INFO_WAITING(log, "gRPC connections: refused past ", guard.fd_ceiling,
                   " open descriptors (--grpc-max-connections=", flags.grpc_max_connections,
                   ", fd limit ", fd_limit, ")");
}

}  // namespace

absl::StatusOr<GrpcServer> StartGrpcServer(const ServerFlags& flags, rlim_t fd_limit,
                                           InferenceService& service, common::Logger* log) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  GrpcServer started;
  const std::string address = absl::StrCat(flags.grpc_address, ":", flags.grpc_port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(flags);
  if (!credentials.ok()) {
    // A missing PEM file (NotFound) is a bad flag too: the process exits 2 for any of these.
    return absl::InvalidArgumentError(credentials.status().message());
  }
  builder.AddListeningPort(address, *credentials, &started.port);
  // gRPC sets SO_REUSEPORT by default, so a second server on a taken port would bind too and
  // take a share of the clients (seen: 13 of 30 calls answered by the wrong process). A busy
  // port must fail the start, as the HTTP and metrics ports do.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  SetMessageLimits(flags, log, builder);
  SetConnectionPolicy(flags, builder);
  builder.RegisterService(&service);
  ConfigureConnectionGuards(flags, fd_limit, log);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     " (port in use, or a bad address?); choose another --grpc-port"));
  }
  return started;
}

void FollowServingState(grpc::Server& server, ServingState& serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  // Readiness: the overall service ("") turns SERVING once the models have loaded and back to
  // NOT_SERVING while draining. Liveness: "liveness" is SERVING for as long as RPCs are served at
  // all, so a Kubernetes liveness probe never restarts a pod that is loading or draining.
  // gRPC's health service follows the serving state, as ServerLive/ServerReady and HTTP do.
  serving.set_on_change([health](bool live, bool ready) {
    health->SetServingStatus("liveness", live);
    health->SetServingStatus(ready);
  });
}

}  // namespace sluice::server
