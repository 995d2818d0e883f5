#include "client/tensor_codec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/shape.h"
#include "common/wire/typed_contents.h"

namespace sluice::client {
namespace {

using wire::ShapeToString;

// Counts the elements of a serialized BYTES tensor, checking its framing.
absl::StatusOr<int64_t> CountBytesElements(absl::string_view raw) {
  wire::BytesElementReader reader(raw);
  absl::string_view element;
  while (reader.Next(element)) {
  }
  switch (reader.error()) {
    case wire::BytesElementReader::Error::kNone:
      return reader.index();
    case wire::BytesElementReader::Error::kTruncatedLength:
      return absl::InvalidArgumentError(
          absl::StrCat("BYTES data ends inside the length prefix of element ", reader.index()));
    case wire::BytesElementReader::Error::kTruncatedElement:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("BYTES element ", reader.index(), " declares ",
                                                 reader.declared_length(), " bytes but only ",
                                                 reader.remaining(), " remain"));
}

// Checks that `raw` holds exactly a tensor of `datatype` and `shape`; `what` names it in errors
// ("input 'INPUT0'").
absl::Status CheckRawSize(absl::string_view what, absl::string_view datatype,
                          absl::Span<const int64_t> shape, absl::string_view raw) {
  absl::StatusOr<int64_t> element_size = DataTypeSize(datatype);
  if (!element_size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", element_size.status().message()));
  }
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", ShapeToString(shape), ": ", count.status().message()));
  }
  if (*element_size == 0) {
    absl::StatusOr<int64_t> actual = CountBytesElements(raw);
    if (!actual.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", actual.status().message()));
    }
    if (*actual != *count) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", *actual,
                                                     " BYTES elements for shape ",
                                                     ShapeToString(shape), " (", *count, ")"));
    }
    return absl::OkStatus();
  }
  // count * size cannot overflow in practice for data that fits in memory, but check anyway.
  int64_t expected;
  if (__builtin_mul_overflow(*count, *element_size, &expected)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": byte size of shape ", ShapeToString(shape), " overflows"));
  }
  if (static_cast<int64_t>(raw.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", raw.size(), " bytes for ", datatype,
                                                   " shape ", ShapeToString(shape), " (expected ",
                                                   expected, ")"));
  }
  return absl::OkStatus();
}

// ---- typed contents -> raw --------------------------------------------------------------------

// The wire rules (common/wire/typed_contents.h), with the client's messages.
absl::StatusOr<std::string> TypedContentsToRaw(const inference::InferTensorContents& contents,
                                               absl::string_view datatype, absl::string_view what) {
  std::string raw;
  const wire::DataType type = wire::DataTypeFromName(datatype);
  const wire::TypedConversion result = wire::TypedContentsToRaw(contents, type, raw);
  switch (result.error) {
    case wire::TypedConversion::Error::kNone:
      return raw;
    case wire::TypedConversion::Error::kOutOfRange:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": typed value ", result.value, " does not fit the datatype"));
    case wire::TypedConversion::Error::kElementTooLong:
      return absl::InvalidArgumentError(absl::StrCat(what, ": a BYTES element exceeds 4 GiB"));
    case wire::TypedConversion::Error::kNoTypedField:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", datatype, " has no typed contents; it must come raw"));
    case wire::TypedConversion::Error::kInvalidType:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown datatype ", datatype));
}

absl::StatusOr<OutputTensor> DecodeOutputAt(const inference::ModelInferResponse& response,
                                            int index) {
  const auto& tensor = response.outputs(index);
  OutputTensor output;
  output.name = tensor.name();
  output.datatype = tensor.datatype();
  output.shape.assign(tensor.shape().begin(), tensor.shape().end());
  const std::string what = absl::StrCat("output '", tensor.name(), "'");
  if (response.raw_output_contents_size() > 0) {
    if (response.raw_output_contents_size() != response.outputs_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("response has ", response.raw_output_contents_size(),
                       " raw_output_contents for ", response.outputs_size(), " outputs"));
    }
    output.raw = response.raw_output_contents(index);
  } else {
    ASSIGN_OR_RETURN(output.raw, TypedContentsToRaw(tensor.contents(), tensor.datatype(), what));
  }
  RETURN_IF_ERROR(CheckRawSize(what, output.datatype, output.shape, output.raw));
  return output;
}

}  // namespace

// ---- Data types -------------------------------------------------------------------------------

absl::StatusOr<int64_t> DataTypeSize(absl::string_view datatype) {
  const wire::DataType type = wire::DataTypeFromName(datatype);
  if (type != wire::DataType::kInvalid) return static_cast<int64_t>(wire::DataTypeByteSize(type));
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown datatype '", datatype,
      "' (known: BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, "
      "FP32, FP64, BYTES)"));
}

// ---- Raw bytes --------------------------------------------------------------------------------

std::string SerializeBytesElements(absl::Span<const std::string> elements) {
  size_t total = 0;
  for (const std::string& element : elements) total += wire::kBytesLengthPrefix + element.size();
  std::string raw;
  raw.reserve(total);
  for (const std::string& element : elements) wire::AppendBytesElement(raw, element);
  return raw;
}

absl::StatusOr<std::vector<std::string>> ParseBytesElements(absl::string_view raw) {
  RETURN_IF_ERROR(CountBytesElements(raw).status());
  std::vector<std::string> elements;
  wire::BytesElementReader reader(raw);
  absl::string_view element;
  while (reader.Next(element)) elements.emplace_back(element);
  return elements;
}

// ---- Building requests ------------------------------------------------------------------------

absl::Status AddRawInput(inference::ModelInferRequest& request, absl::string_view name,
                         absl::string_view datatype, absl::Span<const int64_t> shape,
                         std::string raw) {
  const std::string what = absl::StrCat("input '", name, "'");
  if (name.empty()) return absl::InvalidArgumentError("input name is empty");
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot add raw ", what, ": the request has typed (contents) inputs"));
  }
  for (const auto& input : request.inputs()) {
    if (input.name() == name) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot add ", what, ": the request already has it"));
    }
  }
  RETURN_IF_ERROR(CheckRawSize(what, datatype, shape, raw));
  auto* input = request.add_inputs();
  input->set_name(std::string(name));
  input->set_datatype(std::string(datatype));
  input->mutable_shape()->Add(shape.begin(), shape.end());
  *request.add_raw_input_contents() = std::move(raw);
  return absl::OkStatus();
}

absl::Status AddBytesInput(inference::ModelInferRequest& request, absl::string_view name,
                           absl::Span<const int64_t> shape,
                           absl::Span<const std::string> elements) {
  return AddRawInput(request, name, "BYTES", shape, SerializeBytesElements(elements));
}

void AddRequestedOutput(inference::ModelInferRequest& request, absl::string_view name) {
  request.add_outputs()->set_name(std::string(name));
}

// ---- Decoding responses -----------------------------------------------------------------------

absl::StatusOr<OutputTensor> DecodeOutput(const inference::ModelInferResponse& response,
                                          absl::string_view name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) return DecodeOutputAt(response, i);
  }
  std::vector<std::string> names;
  for (const auto& output : response.outputs()) names.push_back(output.name());
  return absl::NotFoundError(absl::StrCat("response has no output '", name,
                                          "' (outputs: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<std::vector<OutputTensor>> DecodeOutputs(
    const inference::ModelInferResponse& response) {
  std::vector<OutputTensor> outputs;
  outputs.reserve(response.outputs_size());
  for (int i = 0; i < response.outputs_size(); ++i) {
    ASSIGN_OR_RETURN(OutputTensor output, DecodeOutputAt(response, i));
    outputs.push_back(std::move(output));
  }
  return outputs;
}

}  // namespace sluice::client
