#include "server/http/content_coding.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/status_convert.h"

namespace sluice::server::http {
namespace {

// zlib's windowBits: 15 (a 32 KiB window) plus 16 for a gzip wrapper; plain 15 for deflate,
// which HTTP defines as the zlib format (RFC 1950), what tritonclient and curl send.
int WindowBits(ContentCoding coding) { return coding == ContentCoding::kGzip ? 15 + 16 : 15; }

// Inflates in steps of this many bytes of output at most, so that the budget is asked before
// memory is taken, never after.
constexpr uint64_t kInflateStep = 256 << 10;

}  // namespace

absl::string_view ContentCodingName(ContentCoding coding) {
  switch (coding) {
    case ContentCoding::kGzip:
      return "gzip";
    case ContentCoding::kDeflate:
      return "deflate";
    case ContentCoding::kIdentity:
      break;
  }
  return "identity";
}

absl::StatusOr<ContentCoding> ParseContentEncoding(absl::string_view header) {
  const std::string value = absl::AsciiStrToLower(absl::StripAsciiWhitespace(header));
  if (value.empty() || value == "identity") return ContentCoding::kIdentity;
  if (value == "gzip" || value == "x-gzip") return ContentCoding::kGzip;
  if (value == "deflate") return ContentCoding::kDeflate;
  return absl::UnimplementedError(
      absl::StrCat("Content-Encoding '", header.substr(0, 64),
                   "' is not supported: send the body as it is, or gzip or deflate (one coding)"));
}

ContentCoding ChooseResponseCoding(absl::string_view accept_encoding) {
  // q-value of each coding named; "*" stands for every coding not named.
  double gzip = -1, deflate = -1, any = -1;
  for (absl::string_view item : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    double q = 1.0;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view param = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&param, "q=") || absl::ConsumePrefix(&param, "Q=")) {
        if (!absl::SimpleAtod(param, &q)) q = 0;
      }
    }
    if (name == "gzip" || name == "x-gzip") {
      gzip = q;
    } else if (name == "deflate") {
      deflate = q;
    } else if (name == "*") {
      any = q;
    }
  }
  if (gzip < 0) gzip = any;
  if (deflate < 0) deflate = any;
  if (gzip > 0) return ContentCoding::kGzip;
  if (deflate > 0) return ContentCoding::kDeflate;
  return ContentCoding::kIdentity;
}

absl::StatusOr<std::string> Inflate(absl::string_view coded, ContentCoding coding,
                                    uint64_t max_bytes, absl::string_view limit_name,
                                    const std::function<bool(uint64_t)>& reserve,
                                    uint64_t* reserved) {
  *reserved = 0;
  if (coded.size() > UINT32_MAX) {  // zlib counts input in 32 bits
    return PayloadTooLargeError(
        absl::StrCat("a compressed request body over ", UINT32_MAX, " bytes"));
  }
  z_stream stream{};
  if (inflateInit2(&stream, WindowBits(coding)) != Z_OK) {
    return absl::InternalError("zlib: inflateInit2 failed");
  }
  std::string out;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(coded.data()));
  stream.avail_in = static_cast<uInt>(coded.size());
  absl::Status status;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (out.size() >= max_bytes) {
      status = PayloadTooLargeError(absl::StrCat("the ", ContentCodingName(coding),
                                                 " request body inflates to more than ", max_bytes,
                                                 " bytes (", limit_name, ")"));
      break;
    }
    const uint64_t step = std::min<uint64_t>(kInflateStep, max_bytes - out.size());
    if (!reserve(step)) {
      status = absl::UnavailableError("no room left for the inflated request body");
      break;
    }
    *reserved += step;
    const size_t before = out.size();
    out.resize(before + step);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    stream.avail_out = static_cast<uInt>(step);
    rc = inflate(&stream, Z_NO_FLUSH);
    out.resize(before + (step - stream.avail_out));
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && stream.avail_in == 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat("the ", ContentCodingName(coding), " request body is truncated"));
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      status = absl::InvalidArgumentError(
          absl::StrCat("the request body is not valid ", ContentCodingName(coding), " data (",
                       stream.msg != nullptr ? stream.msg : "zlib error", ")"));
      break;
    }
  }
  if (status.ok() && stream.avail_in != 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat("the ", ContentCodingName(coding), " request body has ", stream.avail_in,
                     " bytes after the end of its compressed data"));
  }
  inflateEnd(&stream);
  if (!status.ok()) return status;
  out.shrink_to_fit();
  return out;
}

absl::StatusOr<std::string> Deflate(absl::string_view plain, ContentCoding coding) {
  if (plain.size() > UINT32_MAX / 2) {
    return absl::ResourceExhaustedError("too large to compress in one call");
  }
  z_stream stream{};
  if (deflateInit2(&stream, 1, Z_DEFLATED, WindowBits(coding), 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, plain.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  stream.avail_in = static_cast<uInt>(plain.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  // One call: deflateBound guarantees the room.
  const int rc = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (rc != Z_STREAM_END) return absl::InternalError("zlib: deflate did not finish");
  return out;
}

}  // namespace sluice::server::http
