// Process-wide: interposes libc's recvmsg and close (process_wide_reset_guard.h says why).

#include "server/process_wide_reset_guard.h"

#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

// Defined only in sanitizer builds (compiler-rt's interceptors, clang 14 naming).
extern "C" ssize_t __interceptor_recvmsg(int, msghdr*, int) __attribute__((weak));
extern "C" int __interceptor_close(int) __attribute__((weak));

namespace sluice::server {
namespace {

constexpr char kClientPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr int kClientPrefaceBytes = 24;
constexpr uint8_t kDataType = 0x0;
constexpr uint8_t kHeadersType = 0x1;
constexpr uint8_t kRstStreamType = 0x3;
constexpr uint8_t kEndStreamFlag = 0x1;
// Streams the client opened most recently, per connection: a reset counts only when it hits one
// of them before the client ended its side (the attack's HEADERS + RST_STREAM). A client that
// cancels calls it has sent in full (a deadline, a user's cancel) is not counted.
constexpr int kRecentStreams = 256;

// One connection's HTTP/2 frame boundaries, followed across reads.
struct Connection {
  int preface_seen = 0;          // bytes of the client preface matched so far
  uint8_t header[9] = {};        // the frame header being collected
  int header_bytes = 0;          // of `header`
  uint64_t payload_left = 0;     // bytes of the current frame's payload still to skip
  int64_t window_start_ms = -1;  // start of the current one-second window
  int resets_in_window = 0;
  uint32_t recent_ids[kRecentStreams] = {};   // 0: empty (stream 0 is the connection)
  bool recent_ended[kRecentStreams] = {};     // the client sent END_STREAM on it
  uint64_t recent_read[kRecentStreams] = {};  // the read (`reads` then) that brought its HEADERS
  int recent_next = 0;
  uint64_t reads = 0;    // recvmsg calls that returned bytes, this one included
  bool closing = false;  // past the cap: gRPC was shown the PINGs that make it send GOAWAY
};

uint32_t StreamId(const uint8_t* header) {
  return ((uint32_t{header[5]} << 24) | (uint32_t{header[6]} << 16) | (uint32_t{header[7]} << 8) |
          header[8]) &
         0x7fffffffu;
}

// Records a client frame; returns whether it is a reset that counts (premature): one on a stream
// the client had not ended, or one that arrives in the same read as the stream's HEADERS (the
// client sent HEADERS, DATA and RST_STREAM back to back, without waiting for anything: the
// attack with whole requests). REQUIRES: mu.
bool Observe(Connection& c, uint8_t type, uint8_t flags, uint32_t stream) {
  if (stream == 0) return false;
  if (type == kHeadersType || type == kDataType) {
    for (int k = 0; k < kRecentStreams; ++k) {
      if (c.recent_ids[k] == stream) {
        if (flags & kEndStreamFlag) c.recent_ended[k] = true;
        return false;
      }
    }
    if (type == kHeadersType) {  // a new stream
      c.recent_ids[c.recent_next] = stream;
      c.recent_ended[c.recent_next] = (flags & kEndStreamFlag) != 0;
      c.recent_read[c.recent_next] = c.reads;
      c.recent_next = (c.recent_next + 1) % kRecentStreams;
    }
    return false;
  }
  if (type != kRstStreamType) return false;
  for (int k = 0; k < kRecentStreams; ++k) {
    if (c.recent_ids[k] == stream) {
      c.recent_ids[k] = 0;
      return !c.recent_ended[k] || c.recent_read[k] == c.reads;
    }
  }
  return false;
}

std::atomic<int> max_resets{0};
std::atomic<int64_t> closed_connections{0};
std::mutex mu;
std::unordered_map<int, Connection>* connections = nullptr;  // guarded by mu; never freed

int64_t NowMs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1000000;
}

enum class Verdict { kKeep, kUntrack, kClose };

// Where a frame header that began in an earlier read (or iovec) starts: before `data`.
constexpr size_t kHeaderBeganEarlier = ~size_t{0};

// Feeds `size` bytes read from the connection; on kClose, `*cut` is the offset in `data` of the
// frame that went past the cap (gRPC is shown the bytes before it), or kHeaderBeganEarlier.
// REQUIRES: mu held.
Verdict Feed(Connection& c, const uint8_t* data, size_t size, int cap, size_t* cut) {
  size_t i = 0;
  // Where the frame header being collected starts in `data`.
  size_t frame_start = c.header_bytes > 0 ? kHeaderBeganEarlier : 0;
  while (i < size) {
    if (c.preface_seen < kClientPrefaceBytes) {
      if (data[i] != static_cast<uint8_t>(kClientPreface[c.preface_seen])) {
        return Verdict::kUntrack;  // not plaintext HTTP/2 (TLS): nothing to see
      }
      ++c.preface_seen;
      ++i;
      continue;
    }
    if (c.payload_left > 0) {
      const size_t skip = std::min<uint64_t>(c.payload_left, size - i);
      c.payload_left -= skip;
      i += skip;
      continue;
    }
    if (c.header_bytes == 0) frame_start = i;
    c.header[c.header_bytes++] = data[i++];
    if (c.header_bytes < 9) continue;
    c.header_bytes = 0;
    c.payload_left = (uint64_t{c.header[0]} << 16) | (uint64_t{c.header[1]} << 8) | c.header[2];
    if (!Observe(c, c.header[3], c.header[4], StreamId(c.header))) continue;
    const int64_t now = NowMs();
    if (c.window_start_ms < 0 || now - c.window_start_ms >= 1000) {
      c.window_start_ms = now;
      c.resets_in_window = 0;
    }
    if (++c.resets_in_window > cap) {
      *cut = frame_start;
      return Verdict::kClose;
    }
  }
  return Verdict::kKeep;
}

using RecvMsg = ssize_t (*)(int, msghdr*, int);
using Close = int (*)(int);
// In sanitizer builds the runtime's interceptors come first (they track descriptors); a
// definition in the executable replaces their weak aliases, so these call them by name.
RecvMsg LibcRecvMsg() {
  static const RecvMsg libc_recvmsg = __interceptor_recvmsg != nullptr
                                          ? &__interceptor_recvmsg
                                          : reinterpret_cast<RecvMsg>(dlsym(RTLD_NEXT, "recvmsg"));
  return libc_recvmsg;
}
Close LibcClose() {
  static const Close libc_close = __interceptor_close != nullptr
                                      ? &__interceptor_close
                                      : reinterpret_cast<Close>(dlsym(RTLD_NEXT, "close"));
  return libc_close;
}

// What gRPC is shown in place of the frame past the cap: PING frames, more within one read than
// --grpc-min-client-ping-interval-ms allows (the server sets GRPC_ARG_HTTP2_MAX_PING_STRIKES to 2,
// grpc_server_builder.cc), so that gRPC itself sends GOAWAY ENHANCE_YOUR_CALM ("too_many_pings")
// and closes the connection once the GOAWAY is written: gRPC 1.51 has no other way to close one
// connection with a GOAWAY, and nothing outside its writer may add a frame to the socket safely.
// Each: length 8, type PING, no flags, stream 0, 8 bytes of opaque data.
constexpr char kPingFrame[] = "\x00\x00\x08\x06\x00\x00\x00\x00\x00sluice!!";
constexpr size_t kPingFrameBytes = sizeof(kPingFrame) - 1;  // without the NUL
constexpr int kInjectedPings = 8;
constexpr size_t kInjectedPingBytes = kInjectedPings * kPingFrameBytes;

// Copies `size` bytes to the buffers of `message` from byte `offset` on. REQUIRES: they fit.
void WriteToIovecs(const msghdr& message, size_t offset, const char* bytes, size_t size) {
  for (size_t v = 0; v < message.msg_iovlen && size > 0; ++v) {
    const size_t len = message.msg_iov[v].iov_len;
    if (offset >= len) {
      offset -= len;
      continue;
    }
    const size_t n = std::min(len - offset, size);
    std::memcpy(static_cast<char*>(message.msg_iov[v].iov_base) + offset, bytes, n);
    bytes += n;
    size -= n;
    offset = 0;
  }
}

// Writes the kInjectedPings PING frames to the buffers of `message` from byte `offset` on; false
// (nothing written) where they do not fit.
bool InjectPings(const msghdr& message, size_t offset) {
  size_t capacity = 0;
  for (size_t v = 0; v < message.msg_iovlen; ++v) capacity += message.msg_iov[v].iov_len;
  if (offset + kInjectedPingBytes > capacity) return false;
  for (int k = 0; k < kInjectedPings; ++k) {
    WriteToIovecs(message, offset + k * kPingFrameBytes, kPingFrame, kPingFrameBytes);
  }
  return true;
}

}  // namespace

void ConfigureResetGuard(const ResetGuardOptions& options) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (connections == nullptr) connections = new std::unordered_map<int, Connection>();
  }
  max_resets.store(options.max_resets_per_second);
}

void TrackAcceptedConnection(int fd) {
  if (max_resets.load(std::memory_order_relaxed) <= 0) return;
  std::lock_guard<std::mutex> lock(mu);
  (*connections)[fd] = Connection{};
}

int64_t ResetGuardClosedConnections() { return closed_connections.load(); }

}  // namespace sluice::server

// The interposers; the executable exports them (server/CMakeLists.txt) so that libgrpc's calls
// through its PLT reach them.
extern "C" ssize_t recvmsg(int fd, msghdr* message, int flags) {
  using namespace sluice::server;  // NOLINT: the file's own namespace, from extern "C"
  const ssize_t read = LibcRecvMsg()(fd, message, flags);
  const int cap = max_resets.load(std::memory_order_relaxed);
  if (read <= 0 || cap <= 0 || (flags & (MSG_PEEK | MSG_ERRQUEUE)) != 0) return read;
  std::lock_guard<std::mutex> lock(mu);
  auto it = connections->find(fd);
  if (it == connections->end()) return read;
  Connection& c = it->second;
  if (c.closing) return 0;  // gRPC is closing it (GOAWAY): the client's further bytes are dropped
  ++c.reads;
  size_t left = static_cast<size_t>(read);
  size_t seen = 0;  // bytes in the iovecs before the current one
  size_t cut = 0;
  Verdict verdict = Verdict::kKeep;
  for (size_t v = 0; v < message->msg_iovlen && left > 0; ++v) {
    const size_t size = std::min(left, message->msg_iov[v].iov_len);
    verdict = Feed(c, static_cast<const uint8_t*>(message->msg_iov[v].iov_base), size, cap, &cut);
    if (verdict != Verdict::kKeep) break;
    seen += size;
    left -= size;
  }
  if (verdict == Verdict::kUntrack) connections->erase(it);
  if (verdict == Verdict::kClose) {
    closed_connections.fetch_add(1, std::memory_order_relaxed);
    // gRPC is shown the frames before the one past the cap, then PING frames that make it send
    // GOAWAY (ENHANCE_YOUR_CALM) and close the connection; what the client sent after them is
    // dropped. Where the PINGs do not fit (or the cut frame's header began in an earlier read),
    // the socket is shut down instead: gRPC then reads end-of-stream and closes, without GOAWAY.
    if (cut != kHeaderBeganEarlier && InjectPings(*message, seen + cut)) {
      c.closing = true;
      return static_cast<ssize_t>(seen + cut + kInjectedPingBytes);
    }
    connections->erase(it);
    shutdown(fd, SHUT_RDWR);
    return static_cast<ssize_t>(cut == kHeaderBeganEarlier ? seen : seen + cut);
  }
  return read;
}

extern "C" int close(int fd) {
  using namespace sluice::server;  // NOLINT
  if (max_resets.load(std::memory_order_relaxed) > 0) {
    std::lock_guard<std::mutex> lock(mu);
    connections->erase(fd);
  }
  return LibcClose()(fd);
}
