#pragma once

// EchoInput: the one way a message quotes client or config input (issue 17 item 7). A name or
// value from a request or a config file is echoed whole only up to a bound; past it, its head is
// kept (cut on a UTF-8 character boundary, so the message stays valid UTF-8 for protobuf string
// fields) and a marker with the full length is appended:
//   EchoInput(50 MB of 'a') == "aaa...a...[truncated: 52428800 bytes]"
// Unbounded echoes turned a NOT_FOUND for a 16 KB model name into RESOURCE_EXHAUSTED at the
// client (the message no longer fit gRPC's headers) and made a 50 MB config `name` a 50 MB load
// error repeated in every RepositoryIndex answer.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace sluice::common {

// Most bytes of one echoed input kept in a message: a valid name (at most 255 bytes) fits whole.
inline constexpr size_t kMaxEchoBytes = 256;
// Most bytes of a whole error message that leaves the process (gRPC status messages, load errors
// in RepositoryIndex): far below gRPC's 8 KiB default header limit.
inline constexpr size_t kMaxMessageBytes = 4096;

// `text` if it has at most `max_bytes` bytes; otherwise its first bytes (at most `max_bytes`,
// backed off to a UTF-8 boundary) followed by "...[truncated: N bytes]".
std::string EchoInput(absl::string_view text, size_t max_bytes = kMaxEchoBytes);

}  // namespace sluice::common
