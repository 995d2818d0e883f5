#pragma once
// Content codings of HTTP bodies (RFC 9110 section 8.4): gzip and deflate, as Triton's HTTP
// front end accepts them and tritonclient.http sends them (`request_compression_algorithm`,
// `response_compression_algorithm`). zlib does the work; this file decides what a header asks
// for and bounds what inflating may produce (a few KiB of gzip can inflate to gigabytes).
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::server::http {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// "gzip", "deflate" or "identity".
absl::string_view ContentCodingName(ContentCoding coding);

// The coding a request's Content-Encoding header names: empty or "identity" is kIdentity;
// "gzip" / "x-gzip" and "deflate" (case-insensitive) are theirs. Anything else, or more than one
// coding stacked ("gzip, br"), is Unimplemented, with a message that names what is accepted
// (the server answers 415).
absl::StatusOr<ContentCoding> ParseContentEncoding(absl::string_view header);

// The coding to answer with, from a request's Accept-Encoding header: gzip if it is acceptable
// (listed, or covered by "*", with a q-value above 0), else deflate if acceptable, else identity.
// An empty or absent header is identity (RFC 9110 lets a server pick any coding then; clients
// that never asked get plain bodies).
ContentCoding ChooseResponseCoding(absl::string_view accept_encoding);

// Inflates `coded` (`coding` must not be kIdentity). Before the output grows, `reserve(n)` is
// asked for n more bytes (the in-flight budget); false stops the inflation. Errors:
// ResourceExhausted when the output would pass `max_bytes` (the message names `limit_name`),
// Unavailable when `reserve` refused, InvalidArgument when the data is not valid `coding` data, is
// truncated or has bytes after its end. On an error, what `reserve` granted is the caller's to give
// back (`*reserved` says how much, success or not).
absl::StatusOr<std::string> Inflate(absl::string_view coded, ContentCoding coding,
                                    uint64_t max_bytes, absl::string_view limit_name,
                                    const std::function<bool(uint64_t)>& reserve,
                                    uint64_t* reserved);

// Compresses `plain` as `coding` (not kIdentity) at zlib's fast level 1: a response is
// compressed on an I/O thread, and level 1 keeps most of the ratio of numeric JSON at a
// fraction of the default level's time. An error (no memory; over 2 GiB) means: answer
// uncompressed.
absl::StatusOr<std::string> Deflate(absl::string_view plain, ContentCoding coding);

}  // namespace sluice::server::http
