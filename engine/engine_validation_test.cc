// Requests the Engine refuses: each invalid request is answered at once, on the submitting
// thread, with the reason (the model and the tensor named); BYTES inputs checked element by
// element.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/engine_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::EncodeStrings;
using ::sluice::engine::testing::EngineTest;
using ::sluice::engine::testing::IdentityConfig;
using ::sluice::engine::testing::Infer;
using ::sluice::engine::testing::InputData;
using ::sluice::engine::testing::MakeRequest;
using ::sluice::engine::testing::SimpleConfig;
using ::sluice::engine::testing::SimpleInputs;
using ::sluice::engine::testing::Spec;
using ::testing::HasSubstr;

// --- Validation ---------------------------------------------------------------------------------

struct RequestSpec {
  std::string model = "simple";
  int64_t version = -1;
  std::vector<InputData> inputs;
  std::vector<std::string> outputs;
};

struct InvalidCase {
  std::string name;
  std::function<void(RequestSpec&)> mutate;
  absl::StatusCode code;
  // Words the message must contain (the model and the tensor).
  std::vector<std::string> mentions;
};

TEST_F(EngineTest, InvalidRequestsAreAnsweredAtOnceWithTheReason) {
  Load(Spec(SimpleConfig()));
  const std::vector<InvalidCase> cases = {
      {"UnknownModel",
       [](RequestSpec& r) { r.model = "nope"; },
       absl::StatusCode::kNotFound,
       {"nope"}},
      {"UnknownVersion",
       [](RequestSpec& r) { r.version = 7; },
       absl::StatusCode::kNotFound,
       {"simple", "7"}},
      {"MissingInput",
       [](RequestSpec& r) { r.inputs.pop_back(); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1"}},
      {"UnknownInputName",
       [](RequestSpec& r) { r.inputs[1].name = "INPUTX"; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUTX"}},
      {"ExtraInput",
       [](RequestSpec& r) {
         r.inputs.push_back({"EXTRA", DataType::kInt32, {1, 16}, r.inputs[0].data});
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "EXTRA"}},
      {"InputGivenTwice",
       [](RequestSpec& r) { r.inputs.push_back(r.inputs[0]); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"WrongDataType",
       [](RequestSpec& r) { r.inputs[1].dtype = DataType::kFp32; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1", "INT32"}},
      {"WrongShape",
       [](RequestSpec& r) {
         r.inputs[0].shape = {1, 15};
         r.inputs[0].data.resize(15 * 4);
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "16"}},
      {"MissingBatchDimension",
       [](RequestSpec& r) { r.inputs[0].shape = {16}; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"BatchLargerThanMax",
       [](RequestSpec& r) {
         for (InputData& input : r.inputs) {
           input.shape = {9, 16};
           input.data.resize(9 * 16 * 4);
         }
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "8"}},
      {"ZeroBatch",
       [](RequestSpec& r) {
         for (InputData& input : r.inputs) {
           input.shape = {0, 16};
           input.data.clear();
         }
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"BatchSizesDiffer",
       [](RequestSpec& r) {
         r.inputs[1].shape = {2, 16};
         r.inputs[1].data.resize(2 * 16 * 4);
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1"}},
      {"ByteSizeMismatch",
       [](RequestSpec& r) { r.inputs[0].data.resize(60); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "64"}},
      {"UnknownRequestedOutput",
       [](RequestSpec& r) { r.outputs = {"OUTPUT9"}; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "OUTPUT9"}},
      {"OutputRequestedTwice",
       [](RequestSpec& r) {
         r.outputs = {"OUTPUT0", "OUTPUT0"};
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "OUTPUT0"}},
  };
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.name);
    RequestSpec spec;
    spec.inputs = SimpleInputs(1);
    c.mutate(spec);
    auto answer = std::make_shared<Answer>();
    engine_->Submit(MakeRequest(spec.model, spec.version, std::move(spec.inputs),
                                Answer::Into(answer), std::move(spec.outputs)));
    // Rejected on the submitting thread, before Submit returned.
    ASSERT_EQ(answer->count(), 1);
    const absl::Status status = answer->result().status();
    EXPECT_EQ(status.code(), c.code) << status;
    for (const std::string& word : c.mentions) {
      EXPECT_THAT(std::string(status.message()), HasSubstr(word));
    }
  }
  // The model still serves valid requests.
  EXPECT_TRUE(Infer(*engine_, "simple", -1, SimpleInputs(1)).ok());
}

TEST_F(EngineTest, BytesInputValidated) {
  Load(Spec(IdentityConfig("strings", DataType::kBytes, {-1}, /*max_batch_size=*/0)));
  std::vector<std::byte> data = EncodeStrings({"ab", "cd"});
  data.pop_back();  // the second string is one byte short
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "strings", -1, {{"INPUT0", DataType::kBytes, {2}, data}});
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("INPUT0"));
}

}  // namespace
}  // namespace sluice::engine
