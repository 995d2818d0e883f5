#include "server/infer_conversion.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "gtest/gtest.h"
#include "server/shared_memory/shared_memory_registry.h"
#include "server/status_convert.h"

namespace sluice::server {
namespace {

using inference::ModelInferRequest;

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest& request, const std::string& name,
                                              const std::string& datatype,
                                              std::vector<int64_t> shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  return input;
}

absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> Convert(const ModelInferRequest& r) {
  return ToEngineRequest(r, nullptr, [](absl::StatusOr<engine::InferenceResponse>) {});
}

// Issue 17 item 7: a 16 KB model name came back in a NOT_FOUND message that no longer fit the
// client's header limit (RESOURCE_EXHAUSTED at the client). Names are bounded on the request
// path, and every echo and every message leaving through ToGrpcStatus is cut.
TEST(InferConversionTest, LongNamesAreRefusedWithTheirEchoCut) {
  const std::string huge(16 << 10, 'm');
  auto expect_refused = [&](const ModelInferRequest& message, absl::string_view what) {
    auto request = Convert(message);
    ASSERT_FALSE(request.ok()) << what;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(request.status().message().find(what), absl::string_view::npos) << request.status();
    EXPECT_NE(request.status().message().find("truncated"), absl::string_view::npos);
    EXPECT_LT(request.status().message().size(), 512u);
  };
  ModelInferRequest message;
  message.set_model_name(huge);
  expect_refused(message, "model name");
  message.set_model_name("simple");
  message.set_id(huge);
  expect_refused(message, "request id");
  message.clear_id();
  AddInput(message, huge, "INT32", {1});
  expect_refused(message, "input name");
  message.clear_inputs();
  (*message.mutable_parameters())[huge].set_int64_param(1);
  expect_refused(message, "parameter key");
  message.clear_parameters();
  message.set_model_version(huge);
  expect_refused(message, "model version");
  message.clear_model_version();
  message.add_outputs()->set_name(huge);
  expect_refused(message, "requested output name");
}

TEST(InferConversionTest, GrpcStatusMessagesAreBounded) {
  const grpc::Status status = ToGrpcStatus(absl::NotFoundError(std::string(1 << 20, 'x')));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(status.error_message().size(), common::kMaxMessageBytes + 64);
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("unknown model 'm'")).error_message(),
            "unknown model 'm'");
}

TEST(InferConversionTest, RawInputsAreBorrowedWithoutCopy) {
  ModelInferRequest message;
  message.set_model_name("simple");
  message.set_model_version("3");
  message.set_id("abc");
  AddInput(message, "INPUT0", "INT32", {1, 4});
  message.add_raw_input_contents(std::string(16, '\x01'));
  message.add_outputs()->set_name("OUTPUT1");
  auto request = Convert(message);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ((*request)->model_name(), "simple");
  EXPECT_EQ((*request)->model_version(), 3);
  EXPECT_EQ((*request)->id, "abc");
  ASSERT_EQ((*request)->inputs.size(), 1u);
  const engine::TensorView& view = (*request)->inputs[0];
  EXPECT_EQ(view.dtype, engine::DataType::kInt32);
  EXPECT_EQ(view.shape, engine::Shape({1, 4}));
  EXPECT_EQ(static_cast<const void*>(view.data.data()),
            static_cast<const void*>(message.raw_input_contents(0).data()));
  EXPECT_EQ((*request)->requested_outputs, std::vector<std::string>({"OUTPUT1"}));
  (*request)->Complete(absl::CancelledError("test"));
}

TEST(InferConversionTest, TypedInputsAreConvertedToLittleEndianBytes) {
  ModelInferRequest message;
  message.set_model_name("m");
  auto* a = AddInput(message, "A", "INT8", {3});
  a->mutable_contents()->add_int_contents(-128);
  a->mutable_contents()->add_int_contents(0);
  a->mutable_contents()->add_int_contents(127);
  auto* b = AddInput(message, "B", "BYTES", {2});
  b->mutable_contents()->add_bytes_contents("hi");
  b->mutable_contents()->add_bytes_contents("");
  auto* c = AddInput(message, "C", "FP32", {1});
  c->mutable_contents()->add_fp32_contents(1.5f);
  auto request = Convert(message);
  ASSERT_TRUE(request.ok()) << request.status();
  const auto& inputs = (*request)->inputs;
  ASSERT_EQ(inputs[0].data.size(), 3u);
  EXPECT_EQ(static_cast<int8_t>(inputs[0].data[0]), -128);
  EXPECT_EQ(static_cast<int8_t>(inputs[0].data[2]), 127);
  const std::string bytes(reinterpret_cast<const char*>(inputs[1].data.data()),
                          inputs[1].data.size());
  EXPECT_EQ(bytes, std::string("\x02\0\0\0hi\0\0\0\0", 10));
  float f;
  std::memcpy(&f, inputs[2].data.data(), 4);
  EXPECT_EQ(f, 1.5f);
  (*request)->Complete(absl::CancelledError("test"));
}

TEST(InferConversionTest, BadRequestsNameTheTensor) {
  struct Case {
    std::string what;
    std::function<void(ModelInferRequest&)> build;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"mixed raw and typed",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "INT32", {1})->mutable_contents()->add_int_contents(1);
         m.add_raw_input_contents(std::string(4, '\0'));
       },
       "'A' has typed contents"},
      {"raw count mismatch",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "INT32", {1});
         AddInput(m, "B", "INT32", {1});
         m.add_raw_input_contents(std::string(4, '\0'));
       },
       "2 inputs but 1 raw_input_contents"},
      {"typed count mismatch",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "FP32", {2})->mutable_contents()->add_fp32_contents(1);
       },
       "'A': shape [2] needs 2 elements but fp32_contents holds 1"},
      {"int8 out of range",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "INT8", {1})->mutable_contents()->add_int_contents(300);
       },
       "'A': int_contents[0] = 300 is out of range"},
      {"fp16 typed", [](ModelInferRequest& m) { AddInput(m, "H", "FP16", {1}); },
       "'H': FP16 has no typed contents field"},
      {"unknown datatype", [](ModelInferRequest& m) { AddInput(m, "A", "FLOAT", {1}); },
       "'A': unknown datatype 'FLOAT'"},
      {"negative dim",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "INT32", {-2});
         m.add_raw_input_contents("");
       },
       "'A': shape [-2] has a negative dimension"},
      {"overflowing shape",
       [](ModelInferRequest& m) {
         AddInput(m, "A", "INT32", {int64_t{1} << 40, int64_t{1} << 40});
         m.add_raw_input_contents("");
       },
       "more elements than fit in 64 bits"},
  };
  for (const Case& c : cases) {
    ModelInferRequest message;
    message.set_model_name("m");
    c.build(message);
    auto request = Convert(message);
    ASSERT_FALSE(request.ok()) << c.what;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(request.status().message().find(c.expected), absl::string_view::npos)
        << c.what << ": " << request.status();
  }
}

TEST(InferConversionTest, ReadsThePriorityAndTimeoutParameters) {
  ModelInferRequest message;
  message.set_model_name("identity");
  AddInput(message, "INPUT0", "INT32", {1});
  message.add_raw_input_contents(std::string(4, '\0'));
  {
    auto request = Convert(message);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_EQ((*request)->priority, 0u);  // the model's default level
    EXPECT_FALSE((*request)->timeout.has_value());
    (*request)->Complete(absl::CancelledError("test"));
  }
  (*message.mutable_parameters())["priority"].set_uint64_param(2);
  (*message.mutable_parameters())["timeout"].set_int64_param(1500);
  (*message.mutable_parameters())["some_backend_parameter"].set_string_param("left alone");
  {
    auto request = Convert(message);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_EQ((*request)->priority, 2u);
    EXPECT_EQ((*request)->timeout, std::chrono::microseconds(1500));
    (*request)->Complete(absl::CancelledError("test"));
  }
  (*message.mutable_parameters())["priority"].set_int64_param(1);  // Triton clients send int64
  (*message.mutable_parameters())["timeout"].set_int64_param(0);   // 0 asks for nothing
  {
    auto request = Convert(message);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_EQ((*request)->priority, 1u);
    EXPECT_FALSE((*request)->timeout.has_value());
    (*request)->Complete(absl::CancelledError("test"));
  }
}

TEST(InferConversionTest, BadPriorityOrTimeoutParametersAreRefused) {
  const std::pair<std::function<void(inference::InferParameter&)>, const char*> cases[] = {
      {[](inference::InferParameter& p) { p.set_int64_param(-1); }, "is -1; it must be >= 0"},
      {[](inference::InferParameter& p) { p.set_string_param("1"); },
       "must be an int64_param or uint64_param"},
      {[](inference::InferParameter& p) { p.set_double_param(1.0); },
       "must be an int64_param or uint64_param"},
  };
  for (const char* name : {"priority", "timeout"}) {
    for (const auto& [set, message] : cases) {
      ModelInferRequest request;
      request.set_model_name("identity");
      set((*request.mutable_parameters())[name]);
      auto converted = Convert(request);
      ASSERT_FALSE(converted.ok()) << name;
      EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(converted.status().message().find(absl::StrCat("parameter '", name, "'")),
                std::string::npos)
          << converted.status();
      EXPECT_NE(converted.status().message().find(message), std::string::npos)
          << converted.status();
    }
  }
  ModelInferRequest request;
  request.set_model_name("identity");
  (*request.mutable_parameters())["timeout"].set_uint64_param(~uint64_t{0});
  EXPECT_EQ(Convert(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InferConversionTest, TextTruncationParameters) {
  ModelInferRequest message;
  message.set_model_name("identity");
  {
    auto request = Convert(message);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_FALSE((*request)->text_truncation.truncate.has_value());  // the model's policy
    EXPECT_FALSE((*request)->text_truncation.from_left);
    EXPECT_EQ((*request)->text_truncation.max_text_pair_tokens, 0);
    (*request)->Complete(absl::CancelledError("test"));
  }
  (*message.mutable_parameters())["truncate"].set_bool_param(false);
  (*message.mutable_parameters())["truncation_direction"].set_string_param("Left");
  (*message.mutable_parameters())["max_text_pair_tokens"].set_int64_param(16);
  {
    auto request = Convert(message);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_EQ((*request)->text_truncation.truncate, false);
    EXPECT_TRUE((*request)->text_truncation.from_left);
    EXPECT_EQ((*request)->text_truncation.max_text_pair_tokens, 16);
    (*request)->Complete(absl::CancelledError("test"));
  }
  const std::pair<std::function<void(ModelInferRequest&)>, const char*> bad[] = {
      {[](ModelInferRequest& r) { (*r.mutable_parameters())["truncate"].set_string_param("no"); },
       "parameter 'truncate' must be a bool_param"},
      {[](ModelInferRequest& r) {
         (*r.mutable_parameters())["truncation_direction"].set_string_param("Up");
       },
       "parameter 'truncation_direction' must be"},
      {[](ModelInferRequest& r) {
         (*r.mutable_parameters())["max_text_pair_tokens"].set_int64_param(-2);
       },
       "parameter 'max_text_pair_tokens' is -2"},
  };
  for (const auto& [set, text] : bad) {
    ModelInferRequest request;
    request.set_model_name("identity");
    set(request);
    auto converted = Convert(request);
    ASSERT_FALSE(converted.ok()) << text;
    EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(converted.status().message().find(text), std::string::npos) << converted.status();
  }
}

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

// Inputs in shared memory have no raw_input_contents entry: the entries belong to the other
// inputs, in order (as tritonclient.grpc sends them); shared-memory inputs are views into the
// mapping; outputs placed in a region are written there and carry parameters, no bytes.
TEST(InferConversionTest, SharedMemoryTensorsAsTritonclientSendsThem) {
  const std::string key = absl::StrCat("/sluice_conv_test_", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  auto* base = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(base, MAP_FAILED);
  std::memcpy(base + 100, "abcdefgh", 8);
  shm::SharedMemoryRegistry registry({});
  ASSERT_TRUE(registry.RegisterSystem("r", key, 0, 4096).ok());

  ModelInferRequest message;
  message.set_model_name("m");
  SetRegion(*AddInput(message, "A", "UINT8", {8})->mutable_parameters(), "r", 8, 100);
  AddInput(message, "B", "UINT8", {3});
  SetRegion(*AddInput(message, "C", "UINT8", {8})->mutable_parameters(), "r", 8, 100);
  message.add_raw_input_contents("xyz");
  auto* out = message.add_outputs();
  out->set_name("Y");
  SetRegion(*out->mutable_parameters(), "r", 16, 200);
  message.add_outputs()->set_name("Z");

  std::vector<shm::OutputPlacement> placements;
  auto request = ToEngineRequest(
      message, nullptr, [](absl::StatusOr<engine::InferenceResponse>) {}, &registry, &placements);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ((*request)->inputs.size(), 3u);
  // A view into the server's own (read-only) mapping of the object, holding the client's bytes.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*request)->inputs[0].data.data()), 8),
            "abcdefgh");
  base[100] = 'Z';  // no copy was taken: the client's write shows through
  EXPECT_EQ(reinterpret_cast<const char*>((*request)->inputs[0].data.data())[0], 'Z');
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*request)->inputs[1].data.data()), 3),
            "xyz");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*request)->inputs[2].data.data()), 8),
            "Zbcdefgh");
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].output, "Y");

  engine::InferenceResponse response;
  response.model_name = "m";
  response.outputs.resize(2);
  response.outputs[0] = {.name = "Y", .dtype = engine::DataType::kUint8, .shape = {4}, .data = {}};
  response.outputs[0].data = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  response.outputs[1] = {.name = "Z", .dtype = engine::DataType::kUint8, .shape = {2}, .data = {}};
  response.outputs[1].data = {std::byte{9}, std::byte{8}};
  inference::ModelInferResponse proto;
  ASSERT_TRUE(ToProtoResponse(std::move(response), placements, &proto).ok());
  EXPECT_EQ(std::string(base + 200, 4), std::string("\x01\x02\x03\x04", 4));
  ASSERT_EQ(proto.raw_output_contents_size(), 2);
  EXPECT_EQ(proto.raw_output_contents(0), "");
  EXPECT_EQ(proto.raw_output_contents(1), std::string("\x09\x08", 2));
  EXPECT_EQ(proto.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), 4);
  EXPECT_EQ(proto.outputs(0).parameters().at("shared_memory_offset").int64_param(), 200);

  // Without a registry (an endpoint with no shared memory) such a tensor is refused.
  auto refused = Convert(message);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  // An entry count that fits neither reading is refused, naming what is expected.
  message.add_raw_input_contents("extra");
  auto miscounted = ToEngineRequest(
      message, nullptr, [](absl::StatusOr<engine::InferenceResponse>) {}, &registry, &placements);
  ASSERT_FALSE(miscounted.ok());
  EXPECT_NE(miscounted.status().message().find("1 inputs not in shared memory but 2"),
            std::string::npos)
      << miscounted.status();
  munmap(base, 4096);
  close(fd);
  shm_unlink(key.c_str());
}

TEST(InferConversionTest, StatisticsAddTheTokenizerEntryRightAfterItsModel) {
  engine::Engine::VersionStats text{"encoder", 3, {}};
  text.stats.prepares = true;
  text.stats.success.Add(std::chrono::microseconds(900));
  engine::PreparationStats& p = text.stats.preparation;
  p.last_prepared_ms = 1234;
  p.items = 5;
  p.jobs = 2;
  p.success.Add(std::chrono::microseconds(300), 2);
  p.fail.Add(std::chrono::microseconds(7));
  p.queue.Add(std::chrono::microseconds(100), 2);
  p.compute.Add(std::chrono::microseconds(150), 2);
  p.compute_by_items[1].Add(std::chrono::microseconds(100));
  p.compute_by_items[4].Add(std::chrono::microseconds(200));
  engine::Engine::VersionStats plain{"simple", 1, {}};
  const inference::ModelStatisticsResponse response = ToStatisticsResponse({text, plain});
  ASSERT_EQ(response.model_stats_size(), 3);
  EXPECT_EQ(response.model_stats(0).name(), "encoder");
  EXPECT_EQ(response.model_stats(0).inference_stats().success().count(), 1u);
  const inference::ModelStatistics& t = response.model_stats(1);
  EXPECT_EQ(t.name(), "encoder/tokenizer");
  EXPECT_EQ(t.version(), "3");
  EXPECT_EQ(t.last_inference(), 1234u);
  EXPECT_EQ(t.inference_count(), 5u);
  EXPECT_EQ(t.execution_count(), 2u);
  EXPECT_EQ(t.inference_stats().success().count(), 2u);
  EXPECT_EQ(t.inference_stats().success().ns(), 600'000u);
  EXPECT_EQ(t.inference_stats().fail().count(), 1u);
  EXPECT_EQ(t.inference_stats().queue().ns(), 200'000u);
  EXPECT_EQ(t.inference_stats().compute_infer().ns(), 300'000u);
  EXPECT_TRUE(t.inference_stats().has_compute_input());  // present, zero
  EXPECT_EQ(t.inference_stats().compute_input().count(), 0u);
  EXPECT_TRUE(t.inference_stats().has_compute_output());
  ASSERT_EQ(t.batch_stats_size(), 2);
  EXPECT_EQ(t.batch_stats(1).batch_size(), 4u);
  EXPECT_EQ(t.batch_stats(1).compute_infer().ns(), 200'000u);
  EXPECT_EQ(response.model_stats(2).name(), "simple");  // no tokenizer, no entry
}

TEST(InferConversionTest, ParsesVersions) {
  EXPECT_EQ(*ParseModelVersion(""), -1);
  EXPECT_EQ(*ParseModelVersion("12"), 12);
  EXPECT_FALSE(ParseModelVersion("0").ok());
  EXPECT_FALSE(ParseModelVersion("latest").ok());
  EXPECT_FALSE(ParseModelVersion("-1").ok());
  // Issue 17 item 7: bounded, whatever SimpleAtoi would skip.
  EXPECT_FALSE(ParseModelVersion(std::string(100, ' ') + "1").ok());
}

TEST(InferConversionTest, ResponseUsesRawOutputContentsInOrder) {
  engine::InferenceResponse response;
  response.model_name = "simple";
  response.model_version = 2;
  response.id = "x";
  engine::Tensor a{
      "OUT_A", engine::DataType::kInt32, {1, 1}, std::vector<std::byte>(4, std::byte{7})};
  engine::Tensor b{"OUT_B", engine::DataType::kFp64, {1}, std::vector<std::byte>(8, std::byte{1})};
  response.outputs = {a, b};
  inference::ModelInferResponse out;
  ToProtoResponse(std::move(response), &out);
  EXPECT_EQ(out.model_name(), "simple");
  EXPECT_EQ(out.model_version(), "2");
  EXPECT_EQ(out.id(), "x");
  ASSERT_EQ(out.outputs_size(), 2);
  ASSERT_EQ(out.raw_output_contents_size(), 2);
  EXPECT_EQ(out.outputs(0).name(), "OUT_A");
  EXPECT_EQ(out.outputs(0).datatype(), "INT32");
  EXPECT_EQ(out.outputs(1).datatype(), "FP64");
  EXPECT_EQ(out.raw_output_contents(0), std::string(4, '\x07'));
  EXPECT_EQ(out.raw_output_contents(1).size(), 8u);
  EXPECT_FALSE(out.outputs(0).has_contents());
}

}  // namespace
}  // namespace sluice::server
