#include "engine/models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/wire/float16.h"
#include "nlohmann/json.hpp"

namespace sluice::engine::models {

using wire::BFloat16ToFloat;
using wire::HalfToFloat;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this code copies it as it is");

namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers over 100 MB; a larger one is certainly not a
// weights header, and refusing it bounds what a corrupt length can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr absl::string_view kMetadataKey = "__metadata__";

struct DtypeInfo {
  absl::string_view name;
  DataType type;
};

// Every safetensors dtype that has a KServe v2 data type. The format's FP8 types (F8_E4M3,
// F8_E5M2) and any future ones are reported as unsupported by name.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", DataType::kBool},  {"U8", DataType::kUint8},   {"I8", DataType::kInt8},
    {"U16", DataType::kUint16}, {"I16", DataType::kInt16},  {"U32", DataType::kUint32},
    {"I32", DataType::kInt32},  {"U64", DataType::kUint64}, {"I64", DataType::kInt64},
    {"F16", DataType::kFp16},   {"BF16", DataType::kBf16},  {"F32", DataType::kFp32},
    {"F64", DataType::kFp64},
};

DataType DtypeFromName(absl::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.type;
  }
  return DataType::kInvalid;
}

std::string SupportedDtypes() {
  std::vector<absl::string_view> names;
  for (const DtypeInfo& info : kDtypes) names.push_back(info.name);
  return absl::StrJoin(names, ", ");
}

absl::Status FileError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path, "': ", what));
}

absl::Status TensorError(absl::string_view path, absl::string_view tensor, absl::string_view what) {
  return FileError(path, absl::StrCat("tensor '", tensor, "': ", what));
}

// One header entry, validated against the data section but not yet against the other entries.
struct Entry {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A JSON number that is a non-negative integer fitting int64 (as shapes and offsets must be).
bool AsNonNegativeInt64(const Json& value, int64_t& out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    out = value.get<int64_t>();
    return out >= 0;
  }
  return false;
}

absl::StatusOr<Entry> ParseEntry(absl::string_view path, const std::string& name, const Json& value,
                                 uint64_t data_bytes) {
  auto fail = [&](absl::string_view what) { return TensorError(path, name, what); };
  if (!value.is_object()) {
    return fail(absl::StrCat("entry is a JSON ", value.type_name(), ", not an object"));
  }
  Entry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) return fail("has no string field 'dtype'");
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  entry.dtype = DtypeFromName(dtype_name);
  if (entry.dtype == DataType::kInvalid) {
    return fail(absl::StrCat("dtype '", dtype_name,
                             "' is not supported (supported: ", SupportedDtypes(), ")"));
  }

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) return fail("has no array field 'shape'");
  for (const Json& dim : *shape) {
    int64_t size = 0;
    if (!AsNonNegativeInt64(dim, size)) {
      return fail(absl::StrCat("shape ", shape->dump(), " has a dimension that is not a ",
                               "non-negative integer"));
    }
    entry.shape.push_back(size);
  }

  auto offsets = value.find("data_offsets");
  int64_t begin = 0;
  int64_t end = 0;
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !AsNonNegativeInt64((*offsets)[0], begin) || !AsNonNegativeInt64((*offsets)[1], end)) {
    return fail("needs 'data_offsets': [begin, end] with non-negative integers");
  }
  entry.begin = static_cast<uint64_t>(begin);
  entry.end = static_cast<uint64_t>(end);
  const std::string offsets_text = absl::StrCat("data_offsets [", begin, ", ", end, "]");
  if (entry.begin > entry.end) return fail(absl::StrCat(offsets_text, " end before begin"));
  if (entry.end > data_bytes) {
    return fail(absl::StrCat(offsets_text, " end beyond the data section (", data_bytes,
                             " bytes; truncated file?)"));
  }

  absl::StatusOr<int64_t> elements = ElementCount(entry.shape);
  if (!elements.ok()) return fail(elements.status().message());
  absl::StatusOr<size_t> bytes = FixedByteSize(entry.dtype, *elements);
  if (!bytes.ok()) return fail(bytes.status().message());
  if (entry.end - entry.begin != *bytes) {
    return fail(absl::StrCat(offsets_text, " hold ", entry.end - entry.begin, " bytes but shape ",
                             ShapeToString(entry.shape), " of ", dtype_name, " needs ", *bytes));
  }
  return entry;
}

}  // namespace

// A read-only private mapping of a whole file.
struct SafetensorsFile::Mapping {
  const std::byte* data = nullptr;
  size_t size = 0;

  Mapping(const std::byte* mapped, size_t bytes) : data(mapped), size(bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(const_cast<std::byte*>(data), size); }
};

SafetensorsFile::SafetensorsFile(std::string path, std::unique_ptr<Mapping> mapping)
    : path_(std::move(path)), mapping_(std::move(mapping)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("safetensors file '", path, "' does not exist"));
    }
    return FileError(path, absl::StrCat("cannot open: ", std::strerror(error)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return FileError(path, "is not a regular file");
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    return FileError(path, absl::StrCat("is ", size,
                                        " bytes long, too short for the 8-byte header length "
                                        "(truncated file?)"));
  }
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps the file's pages reachable
  if (mapped == MAP_FAILED) {
    return FileError(path, absl::StrCat("cannot map ", size, " bytes: ", std::strerror(map_error)));
  }
  SafetensorsFile file(path,
                       std::make_unique<Mapping>(static_cast<const std::byte*>(mapped), size));
  RETURN_IF_ERROR(file.ParseMapped());
  return file;
}

absl::Status SafetensorsFile::ParseMapped() {
  const std::byte* bytes = mapping_->data;
  const uint64_t size = mapping_->size;
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    header_bytes |= static_cast<uint64_t>(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
  }
  if (header_bytes > size - 8) {
    return FileError(path_, absl::StrCat("header length ", header_bytes, " exceeds the ", size - 8,
                                         " bytes after the length field (truncated or not a "
                                         "safetensors file?)"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return FileError(path_, absl::StrCat("header length ", header_bytes, " exceeds the limit of ",
                                         kMaxHeaderBytes, " bytes"));
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const std::span<const std::byte> data_section(bytes + 8 + header_bytes, size - 8 - header_bytes);

  // nlohmann keeps the last of repeated keys silently; the callback sees every top-level key so
  // that a file naming a tensor twice is refused instead of half-read.
  std::set<std::string> names;
  std::string repeated;
  auto track_names = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!names.insert(parsed.get<std::string>()).second && repeated.empty()) {
        repeated = parsed.get<std::string>();
      }
    }
    return true;
  };
  Json header;
  // nlohmann reports syntax errors by throwing; this is the only place it parses, and nothing
  // escapes it.
  try {
    header = Json::parse(header_begin, header_begin + header_bytes, track_names);
  } catch (const Json::exception& error) {
    return FileError(path_, absl::StrCat("header is not valid JSON: ", error.what()));
  }
  if (!header.is_object()) {
    return FileError(path_,
                     absl::StrCat("header is a JSON ", header.type_name(), ", not an object"));
  }
  if (!repeated.empty()) {
    return FileError(path_, absl::StrCat("header names '", repeated, "' more than once"));
  }

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        return FileError(path_, absl::StrCat("'__metadata__' is a JSON ", value.type_name(),
                                             ", not an object of strings"));
      }
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          return FileError(path_, absl::StrCat("'__metadata__' entry '", key, "' is a JSON ",
                                               text.type_name(), ", not a string"));
        }
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(Entry entry, ParseEntry(path_, name, value, data_section.size()));
    entries.push_back(std::move(entry));
  }

  // No two tensors may share a byte. Empty tensors own no bytes and cannot overlap anything.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous != nullptr && entry.begin < previous->end) {
      return FileError(path_, absl::StrCat("tensors '", previous->name, "' [", previous->begin,
                                           ", ", previous->end, ") and '", entry.name, "' [",
                                           entry.begin, ", ", entry.end, ") overlap"));
    }
    previous = &entry;
  }

  tensors_.reserve(entries.size());
  for (Entry& entry : entries) {
    tensors_.push_back(TensorView{std::move(entry.name), entry.dtype, std::move(entry.shape),
                                  data_section.subspan(entry.begin, entry.end - entry.begin)});
  }
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  for (const TensorView& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

absl::string_view SafetensorsDtypeName(DataType type) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.type == type) return info.name;
  }
  return "";
}

absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor) {
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': ", what));
  };
  if (tensor.dtype != DataType::kFp32 && tensor.dtype != DataType::kFp16 &&
      tensor.dtype != DataType::kBf16 && tensor.dtype != DataType::kFp64) {
    return fail(absl::StrCat("dtype ", SafetensorsDtypeName(tensor.dtype),
                             " is not a floating-point type (F32, F16, BF16 or F64)"));
  }
  absl::StatusOr<int64_t> elements = ElementCount(tensor.shape);
  if (!elements.ok()) return fail(elements.status().message());
  absl::StatusOr<size_t> bytes = FixedByteSize(tensor.dtype, *elements);
  if (!bytes.ok()) return fail(bytes.status().message());
  if (*bytes != tensor.data.size()) {
    return fail(absl::StrCat("holds ", tensor.data.size(), " bytes, shape ",
                             ShapeToString(tensor.shape), " needs ", *bytes));
  }
  std::vector<float> values(static_cast<size_t>(*elements));
  const std::byte* source = tensor.data.data();
  // memcpy element by element: the file's bytes carry no alignment promise.
  switch (tensor.dtype) {
    case DataType::kFp32:
      if (!values.empty()) std::memcpy(values.data(), source, *bytes);
      break;
    case DataType::kFp16:
    case DataType::kBf16: {
      const bool half = tensor.dtype == DataType::kFp16;
      for (size_t i = 0; i < values.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, source + 2 * i, 2);
        values[i] = half ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      }
      break;
    }
    default: {  // kFp64
      for (size_t i = 0; i < values.size(); ++i) {
        double value;
        std::memcpy(&value, source + 8 * i, 8);
        values[i] = static_cast<float>(value);
      }
      break;
    }
  }
  return values;
}

absl::StatusOr<std::string> SerializeSafetensors(
    std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const TensorView& tensor : tensors) {
    auto fail = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "': ", what));
    };
    if (tensor.name.empty() || tensor.name == kMetadataKey) return fail("invalid tensor name");
    if (header.contains(tensor.name)) return fail("name given twice");
    const absl::string_view dtype = SafetensorsDtypeName(tensor.dtype);
    if (dtype.empty()) {
      return fail(
          absl::StrCat("data type ", DataTypeName(tensor.dtype), " has no safetensors name"));
    }
    ASSIGN_OR_RETURN(int64_t elements, ElementCount(tensor.shape));
    ASSIGN_OR_RETURN(size_t bytes, FixedByteSize(tensor.dtype, elements));
    if (bytes != tensor.data.size()) {
      return fail(absl::StrCat("holds ", tensor.data.size(), " bytes, shape ",
                               ShapeToString(tensor.shape), " needs ", bytes));
    }
    Json entry = Json::object();
    entry["dtype"] = std::string(dtype);
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = Json::array({offset, offset + bytes});
    header[tensor.name] = std::move(entry);
    offset += bytes;
  }
  std::string text;
  // dump() throws on invalid UTF-8 in a name; that is the caller's input, so it becomes a Status.
  try {
    text = header.dump();
  } catch (const Json::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the safetensors header: ", error.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string file;
  file.reserve(8 + text.size() + offset);
  const uint64_t header_bytes = text.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((header_bytes >> (8 * i)) & 0xff));
  file += text;
  for (const TensorView& tensor : tensors) {
    file.append(reinterpret_cast<const char*>(tensor.data.data()), tensor.data.size());
  }
  return file;
}

absl::Status WriteSafetensorsFile(const std::string& path, std::span<const TensorView> tensors,
                                  const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(tensors, metadata));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine::models
