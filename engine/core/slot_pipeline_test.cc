#include "engine/core/slot_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/device_fault.h"
#include "engine/core/model_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Answer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kWait = std::chrono::seconds(10);

// Everything the fake backend and the pipeline's callbacks did, in order, as "issue b1",
// "wait b1", "scatter b1", "answer b1", "fault", "freed"; with gates the test opens and closes,
// and per-batch scripted results. A batch is named by its first request's id.
struct Script {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> events;
  bool issue_open = true;
  bool wait_open = true;
  std::map<std::string, absl::Status> issue_result;
  std::map<std::string, absl::Status> wait_result;
  std::map<std::string, absl::Status> scatter_result;
  // Scatter answers one request fewer than the batch has.
  std::map<std::string, bool> short_answer;
  // Scatter of this batch waits (at most kWait) until this event happened.
  std::map<std::string, std::string> scatter_waits_for;
  // Per slot: the batch that holds it, from Issue until its requests are answered ("" when free).
  std::vector<std::string> holder;
  int reuse_violations = 0;
  // The thread that ran Issue / Scatter for each batch.
  std::map<std::string, std::thread::id> issue_thread;
  std::map<std::string, std::thread::id> scatter_thread;

  void Record(std::string event) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(event));
    cv.notify_all();
  }
  bool Happened(const std::string& event) {
    return std::find(events.begin(), events.end(), event) != events.end();
  }
  bool WaitFor(const std::string& event) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kWait, [&] { return Happened(event); });
  }
  void SetGate(bool Script::*gate, bool open) {
    std::lock_guard<std::mutex> lock(mu);
    this->*gate = open;
    cv.notify_all();
  }
  // Index of `event` in the log, or -1.
  int IndexOf(const std::string& event) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = std::find(events.begin(), events.end(), event);
    return it == events.end() ? -1 : static_cast<int>(it - events.begin());
  }
  std::vector<std::string> Matching(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const std::string& e : events) {
      if (e.rfind(prefix, 0) == 0) out.push_back(e);
    }
    return out;
  }
};

// A backend whose results the Script decides. Its per-slot state is the name of the batch in the
// slot; each request's answer is ragged (request j of a batch gets a tensor of j + 1 bytes), as a
// packed-token encoder's would be: the pipeline must not care.
class FakeBackend final : public SlotBackend {
 public:
  FakeBackend(Script& script, int slots) : script_(script), in_slot_(slots) {
    script_.holder.assign(slots, "");
  }

  absl::Status Issue(int s, const Batch& batch) override {
    const std::string name = batch.requests.front()->id;
    std::unique_lock<std::mutex> lock(script_.mu);
    script_.events.push_back("enter " + name);  // before the gate: the batch left the queue
    script_.cv.notify_all();
    script_.cv.wait(lock, [&] { return script_.issue_open; });
    script_.issue_thread[name] = std::this_thread::get_id();
    if (!script_.holder[s].empty()) ++script_.reuse_violations;
    script_.holder[s] = name;
    in_slot_[s] = name;
    script_.events.push_back("issue " + name);
    script_.cv.notify_all();
    auto it = script_.issue_result.find(name);
    return it == script_.issue_result.end() ? absl::OkStatus() : it->second;
  }

  absl::Status Wait(int s) override {
    const std::string name = in_slot_[s];
    std::unique_lock<std::mutex> lock(script_.mu);
    script_.cv.wait(lock, [&] { return script_.wait_open; });
    script_.events.push_back("wait " + name);
    script_.cv.notify_all();
    auto it = script_.wait_result.find(name);
    return it == script_.wait_result.end() ? absl::OkStatus() : it->second;
  }

  absl::Status Scatter(int s, const Batch& batch, SlotAnswers& answers) override {
    const std::string name = in_slot_[s];
    std::unique_lock<std::mutex> lock(script_.mu);
    script_.scatter_thread[name] = std::this_thread::get_id();
    script_.events.push_back("scatter " + name);
    script_.cv.notify_all();
    if (auto wait = script_.scatter_waits_for.find(name); wait != script_.scatter_waits_for.end()) {
      const std::string event = wait->second;
      script_.cv.wait_for(lock, kWait, [&] { return script_.Happened(event); });
    }
    if (auto it = script_.scatter_result.find(name); it != script_.scatter_result.end()) {
      return it->second;
    }
    size_t count = batch.requests.size();
    if (script_.short_answer[name]) --count;
    for (size_t j = 0; j < count; ++j) {
      InferenceResponse response;
      Tensor tensor;
      tensor.name = "OUT";
      tensor.dtype = DataType::kUint8;
      tensor.shape = {static_cast<int64_t>(j + 1)};
      tensor.data.assign(j + 1, std::byte{static_cast<unsigned char>(s)});
      response.outputs.push_back(std::move(tensor));
      answers.responses.push_back(std::move(response));
    }
    answers.infer_time = std::chrono::microseconds(5);
    return absl::OkStatus();
  }

 private:
  Script& script_;
  // Completion thread reads what the issuing thread wrote for the same slot; the pipeline orders
  // the two (the batch passes through its mutex-guarded FIFO).
  std::vector<std::string> in_slot_;
};

// Parameter: issue_thread (the CPU executor's shape) or issue on the caller's thread (CUDA's).
class SlotPipelineTest : public ::testing::TestWithParam<bool> {
 protected:
  ~SlotPipelineTest() override {
    // Open every gate so that a failed assertion never leaves a thread blocked at teardown.
    script_.SetGate(&Script::issue_open, true);
    script_.SetGate(&Script::wait_open, true);
    if (pipeline_ != nullptr) pipeline_->Stop();
  }

  void Create(int slots, std::function<absl::Status()> before_batch = nullptr) {
    backend_ = std::make_unique<FakeBackend>(script_, slots);
    SlotPipelineOptions options;
    options.label = "model 'fake'";
    options.issue_thread = GetParam();
    options.answer_on_issue_thread_when_idle = answer_when_idle_;
    options.answer_on_caller = answer_on_caller_;
    options.executor.slot_count = slots;
    options.executor.stats = &stats_;
    options.executor.on_slot_freed = [this] { script_.Record("freed"); };
    options.executor.on_fault = [this](const absl::Status& fault) {
      {
        std::lock_guard<std::mutex> lock(faults_mu_);
        faults_.push_back(fault);
      }
      script_.Record("fault");
    };
    options.executor.before_batch_for_test = std::move(before_batch);
    auto pipeline = SlotPipeline::Create(*backend_, std::move(options));
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    pipeline_ = *std::move(pipeline);
  }

  // Executes batch `name` of `requests` requests (ids name, name.1, name.2, ...); its answers are
  // answers_[name][j]. Answering a request frees its slot in the Script (the pipeline frees the
  // slot itself only after that, so a reuse before is a violation).
  void Execute(const std::string& name, int requests = 1) {
    Batch batch;
    for (int j = 0; j < requests; ++j) {
      auto answer = std::make_shared<Answer>();
      answers_[name].push_back(answer);
      auto into = Answer::Into(answer);
      const bool last = j == requests - 1;
      auto request = std::make_unique<InferenceRequest>(
          "fake", 1, [this, name, into, last](absl::StatusOr<InferenceResponse> result) {
            into(std::move(result));
            if (!last) return;
            std::lock_guard<std::mutex> lock(script_.mu);
            for (std::string& holder : script_.holder) {
              if (holder == name) holder.clear();
            }
            script_.events.push_back("answer " + name);
            script_.cv.notify_all();
          });
      request->id = j == 0 ? name : name + "." + std::to_string(j);
      batch.requests.push_back(std::move(request));
      ++batch.items;
    }
    batch.dispatch_time = std::chrono::steady_clock::now();
    pipeline_->Execute(std::move(batch));
  }

  absl::StatusOr<InferenceResponse> Result(const std::string& name, size_t j = 0) {
    return answers_.at(name).at(j)->WaitForResult(kWait);
  }

  std::vector<absl::Status> Faults() {
    std::lock_guard<std::mutex> lock(faults_mu_);
    return faults_;
  }

  bool WaitForFreed(size_t n) {
    std::unique_lock<std::mutex> lock(script_.mu);
    return script_.cv.wait_for(lock, kWait, [&] {
      return static_cast<size_t>(
                 std::count(script_.events.begin(), script_.events.end(), "freed")) >= n;
    });
  }

  Script script_;
  ModelStats stats_{ModelStatsOptions{.model_name = "fake"}};
  std::unique_ptr<FakeBackend> backend_;
  std::map<std::string, std::vector<std::shared_ptr<Answer>>> answers_;
  std::mutex faults_mu_;
  std::vector<absl::Status> faults_;
  // SlotPipelineOptions::answer_on_issue_thread_when_idle for Create().
  bool answer_when_idle_ = false;
  // SlotPipelineOptions::answer_on_caller for Create() (AnswerOnCallerTest).
  bool answer_on_caller_ = false;
  // Declared last: stopped and destroyed before the backend and the script it uses.
  std::unique_ptr<SlotPipeline> pipeline_;
};

INSTANTIATE_TEST_SUITE_P(IssueThreads, SlotPipelineTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OwnIssueThread" : "CallerIssues";
                         });

TEST_P(SlotPipelineTest, AnswersInOrderAndReusesASlotOnlyAfterItsAnswers) {
  Create(2);
  constexpr int kBatches = 40;
  uint64_t requests = 0;
  for (int b = 0; b < kBatches; ++b) {
    // The batcher's loop: wait for a free slot, hand over the next batch.
    ASSERT_TRUE(WaitForFreed(b >= 2 ? b - 1 : 0));
    ASSERT_TRUE(pipeline_->HasFreeSlot());
    Execute("b" + std::to_string(b), 1 + b % 3);
    requests += 1 + b % 3;
  }
  ASSERT_TRUE(WaitForFreed(kBatches));
  std::vector<std::string> expected;
  for (int b = 0; b < kBatches; ++b) expected.push_back("answer b" + std::to_string(b));
  EXPECT_EQ(script_.Matching("answer "), expected);
  for (int b = 0; b < kBatches; ++b) {
    const std::string name = "b" + std::to_string(b);
    for (size_t j = 0; j < answers_[name].size(); ++j) {
      absl::StatusOr<InferenceResponse> result = Result(name, j);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(answers_[name][j]->count(), 1);
      // Ragged: request j got j + 1 bytes, stamped with the model name by the pipeline.
      EXPECT_EQ(result->outputs.at(0).data.size(), j + 1);
      EXPECT_EQ(result->model_name, "fake");
    }
  }
  {
    std::lock_guard<std::mutex> lock(script_.mu);
    EXPECT_EQ(script_.reuse_violations, 0);
  }
  EXPECT_TRUE(Faults().empty());
  EXPECT_EQ(pipeline_->InFlight(), 0);
  EXPECT_TRUE(pipeline_->HasFreeSlot());
  EXPECT_EQ(stats_.Snapshot().success.count, requests);
}

TEST_P(SlotPipelineTest, InFlightCountsBatchesUntilAnsweredAndSlotsBoundThem) {
  script_.SetGate(&Script::wait_open, false);
  Create(2);
  EXPECT_EQ(pipeline_->ExecuteOnlyEnqueues(), GetParam());
  Execute("b0");
  Execute("b1");
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  EXPECT_EQ(pipeline_->InFlight(), 2);
  script_.SetGate(&Script::wait_open, true);
  ASSERT_TRUE(WaitForFreed(2));
  EXPECT_EQ(pipeline_->InFlight(), 0);
  EXPECT_TRUE(pipeline_->HasFreeSlot());
}

// The issue of b1 fails INTERNAL while b0 is still in flight: b0 is answered with its own result
// first, then b1 fails naming its error, then on_fault (once, before b1's slot is freed); b2,
// taken behind the fault, fails without reaching the backend.
TEST_P(SlotPipelineTest, FaultDuringIssueFailsItsBatchAndTheOnesBehindIt) {
  script_.issue_result["b1"] = absl::InternalError("launch failed");
  script_.SetGate(&Script::wait_open, false);
  const bool own_thread = GetParam();
  // On the pipeline's issue thread, hold the issues until all three batches were taken, so that
  // b2 is queued before the fault; on the caller's thread, b1 faults inside Execute.
  if (own_thread) script_.SetGate(&Script::issue_open, false);
  Create(3);
  Execute("b0");
  Execute("b1");
  if (!own_thread) {
    EXPECT_FALSE(pipeline_->HasFreeSlot());  // latched at once, by Execute
  }
  Execute("b2");  // REQUIRES HasFreeSlot() held when the batcher looked; a fault since is fine
  script_.SetGate(&Script::issue_open, true);
  ASSERT_TRUE(script_.WaitFor("issue b1"));
  script_.SetGate(&Script::wait_open, true);
  ASSERT_TRUE(WaitForFreed(3));

  ASSERT_TRUE(Result("b0").ok()) << Result("b0").status();
  EXPECT_EQ(Result("b1").status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(Result("b1").status().message()), HasSubstr("launch failed"));
  EXPECT_EQ(Result("b2").status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(
      std::string(Result("b2").status().message()),
      HasSubstr("model 'fake': batch not run, its instance faulted earlier: launch failed"));
  EXPECT_THAT(script_.Matching("issue "), ElementsAre("issue b0", "issue b1"));
  EXPECT_THAT(script_.Matching("wait "), ElementsAre("wait b0"));
  // Answers in the order taken; on_fault right after the faulted batch's answers, before its
  // slot is offered again.
  EXPECT_THAT(script_.Matching("answer "), ElementsAre("answer b0", "answer b1", "answer b2"));
  const int fault = script_.IndexOf("fault");
  ASSERT_GE(fault, 0);
  EXPECT_EQ(fault, script_.IndexOf("answer b1") + 1);
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_EQ(Faults()[0].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(Faults()[0].message()), HasSubstr("launch failed"));
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  EXPECT_EQ(pipeline_->InFlight(), 0);
  EXPECT_EQ(pipeline_->fault().message(), "launch failed");
  const ModelStatsSnapshot snapshot = stats_.Snapshot();
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kInternal)], 2u);
  EXPECT_EQ(snapshot.success.count, 1u);
}

// b0's Wait finds an error (any code: made INTERNAL). b1 was issued before the fault latched and
// is answered on its own evidence; b2, taken after, never reaches the backend.
TEST_P(SlotPipelineTest, FaultFoundAtWaitFailsThatBatchAndLatches) {
  script_.wait_result["b0"] = absl::DataLossError("device fell off the bus");
  script_.SetGate(&Script::wait_open, false);
  Create(3);
  Execute("b0");
  Execute("b1");
  ASSERT_TRUE(script_.WaitFor("issue b1"));
  EXPECT_TRUE(pipeline_->HasFreeSlot());
  script_.SetGate(&Script::wait_open, true);
  ASSERT_TRUE(WaitForFreed(2));
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  Execute("b2");
  ASSERT_TRUE(WaitForFreed(3));

  EXPECT_EQ(Result("b0").status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(Result("b0").status().message()), HasSubstr("device fell off the bus"));
  ASSERT_TRUE(Result("b1").ok()) << Result("b1").status();
  EXPECT_THAT(std::string(Result("b2").status().message()),
              HasSubstr("batch not run, its instance faulted earlier: device fell off the bus"));
  EXPECT_THAT(script_.Matching("issue "), ElementsAre("issue b0", "issue b1"));
  EXPECT_THAT(script_.Matching("scatter "), ElementsAre("scatter b1"));
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_EQ(Faults()[0].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(script_.IndexOf("fault"), script_.IndexOf("answer b0") + 1);
}

// A process-fatal mark (engine/core/device_fault.h: a sticky CUDA error) survives the pipeline's
// rewording into INTERNAL, at wait and through the before_batch hook, up to on_fault.
TEST_P(SlotPipelineTest, ProcessFatalMarkReachesOnFault) {
  script_.wait_result["b0"] = MarkProcessFatal(absl::DataLossError("cudaErrorIllegalAddress"));
  Create(1);
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_EQ(Faults()[0].code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsProcessFatal(Faults()[0]));
}

TEST_P(SlotPipelineTest, ProcessFatalMarkFromTheHookReachesOnFault) {
  Create(1, [] { return MarkProcessFatal(absl::InternalError("injected sticky")); });
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_TRUE(IsProcessFatal(Faults()[0]));
  EXPECT_THAT(std::string(Faults()[0].message()),
              HasSubstr("injected test fault: injected sticky"));
}

TEST_P(SlotPipelineTest, MalformedOutputsAtScatterAreAFault) {
  script_.scatter_result["b0"] = absl::InvalidArgumentError("output 'y' holds 3 bytes, needs 4");
  Create(2);
  Execute("b0", 2);
  ASSERT_TRUE(WaitForFreed(1));
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(Result("b0", j).status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(Result("b0", j).status().message()), HasSubstr("holds 3 bytes"));
  }
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_FALSE(pipeline_->HasFreeSlot());
}

TEST_P(SlotPipelineTest, TooFewAnswersFromScatterAreAFault) {
  script_.short_answer["b0"] = true;
  Create(1);
  Execute("b0", 3);
  ASSERT_TRUE(WaitForFreed(1));
  EXPECT_EQ(Result("b0", 2).status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(Result("b0", 2).status().message()),
              HasSubstr("model 'fake': backend answered 2 of 3 requests"));
  EXPECT_EQ(Faults().size(), 1u);
}

TEST_P(SlotPipelineTest, NonInternalIssueErrorFailsOnlyItsBatch) {
  script_.issue_result["b0"] = absl::InvalidArgumentError("value out of range");
  Create(1);
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  EXPECT_EQ(Result("b0").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(pipeline_->HasFreeSlot());
  Execute("b1");
  ASSERT_TRUE(WaitForFreed(2));
  EXPECT_TRUE(Result("b1").ok()) << Result("b1").status();
  EXPECT_TRUE(Faults().empty());
  // Wait and Scatter are not called for a batch that failed to issue.
  EXPECT_THAT(script_.Matching("wait "), ElementsAre("wait b1"));
}

TEST_P(SlotPipelineTest, BeforeBatchHookFaultsWithoutIssuing) {
  std::atomic<int> calls{0};
  Create(1, [&calls]() -> absl::Status {
    if (calls.fetch_add(1) == 1) return absl::InternalError("injected by the test");
    return absl::OkStatus();
  });
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  ASSERT_TRUE(pipeline_->HasFreeSlot());
  Execute("b1");
  ASSERT_TRUE(WaitForFreed(2));
  EXPECT_TRUE(Result("b0").ok());
  EXPECT_THAT(std::string(Result("b1").status().message()),
              HasSubstr("model 'fake': injected test fault: injected by the test"));
  EXPECT_THAT(script_.Matching("issue "), ElementsAre("issue b0"));
  EXPECT_EQ(Faults().size(), 1u);
  EXPECT_FALSE(pipeline_->HasFreeSlot());
}

// Stop() with batches in flight answers every one of them (exactly once) before it returns.
TEST_P(SlotPipelineTest, StopFinishesEveryBatchTaken) {
  script_.SetGate(&Script::wait_open, false);
  Create(3);
  Execute("b0", 2);
  Execute("b1");
  Execute("b2");
  std::thread stopper([this] {
    pipeline_->Stop();
    script_.Record("stopped");
  });
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  script_.SetGate(&Script::wait_open, true);
  stopper.join();
  EXPECT_THAT(script_.Matching("answer "), ElementsAre("answer b0", "answer b1", "answer b2"));
  EXPECT_GT(script_.IndexOf("stopped"), script_.IndexOf("answer b2"));
  for (const auto& [name, answers] : answers_) {
    for (const auto& answer : answers) {
      EXPECT_EQ(answer->count(), 1) << name;
      EXPECT_TRUE(answer->result().ok()) << name;
    }
  }
  EXPECT_EQ(pipeline_->InFlight(), 0);
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  pipeline_->Stop();  // idempotent
}

// With its own issue thread the pipeline overlaps batch k's answers with batch k+1's issue (the
// CPU executor's compute): b0's Scatter waits for b1's Issue, which must run meanwhile.
TEST_P(SlotPipelineTest, IssueThreadOverlapsTheNextBatchWithAnswers) {
  if (!GetParam()) GTEST_SKIP() << "the caller's thread issues: nothing to overlap";
  script_.scatter_waits_for["b0"] = "issue b1";
  Create(2);
  Execute("b0");
  ASSERT_TRUE(script_.WaitFor("scatter b0"));
  Execute("b1");
  ASSERT_TRUE(WaitForFreed(2));
  EXPECT_LT(script_.IndexOf("issue b1"), script_.IndexOf("answer b0"));
  EXPECT_TRUE(Result("b0").ok());
  EXPECT_TRUE(Result("b1").ok());
}

// --- answer_on_issue_thread_when_idle (the CPU executor's setting) -------------------------------

TEST_P(SlotPipelineTest, IdleIssueThreadAnswersALoneBatchItself) {
  if (!GetParam()) GTEST_SKIP() << "only with an issue thread";
  answer_when_idle_ = true;
  Create(2);
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  EXPECT_TRUE(Result("b0").ok());
  std::lock_guard<std::mutex> lock(script_.mu);
  // Nothing overlapped it: no hand-off to the completion thread.
  EXPECT_EQ(script_.scatter_thread.at("b0"), script_.issue_thread.at("b0"));
}

TEST_P(SlotPipelineTest, QueuedBatchStillOverlapsWithTheAnswers) {
  if (!GetParam()) GTEST_SKIP() << "only with an issue thread";
  answer_when_idle_ = true;
  script_.scatter_waits_for["b0"] = "issue b1";
  Create(2);
  script_.SetGate(&Script::issue_open, false);
  Execute("b0");
  ASSERT_TRUE(script_.WaitFor("enter b0"));  // b0 is in Issue, held at the gate
  Execute("b1");                             // queued behind it
  script_.SetGate(&Script::issue_open, true);
  ASSERT_TRUE(WaitForFreed(2));
  // b1 waited to be issued when b0's Issue ended: b0 went to the completion thread, and b1
  // computed while b0 was answered.
  EXPECT_LT(script_.IndexOf("issue b1"), script_.IndexOf("answer b0"));
  EXPECT_LT(script_.IndexOf("answer b0"), script_.IndexOf("answer b1"));
  EXPECT_TRUE(Result("b0").ok());
  EXPECT_TRUE(Result("b1").ok());
  std::lock_guard<std::mutex> lock(script_.mu);
  EXPECT_NE(script_.scatter_thread.at("b0"), script_.issue_thread.at("b0"));
  EXPECT_EQ(script_.reuse_violations, 0);
}

TEST_P(SlotPipelineTest, FaultFoundWhileTheIssueThreadAnswersIsReportedOnce) {
  if (!GetParam()) GTEST_SKIP() << "only with an issue thread";
  answer_when_idle_ = true;
  script_.scatter_result["b0"] = absl::InternalError("malformed outputs");
  Create(2);
  Execute("b0");
  ASSERT_TRUE(WaitForFreed(1));
  EXPECT_EQ(Result("b0").status().code(), absl::StatusCode::kInternal);
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_THAT(std::string(Faults()[0].message()), HasSubstr("malformed outputs"));
  // Answers first, then on_fault, then the slot.
  EXPECT_LT(script_.IndexOf("fault"), script_.IndexOf("freed"));
  EXPECT_FALSE(pipeline_->HasFreeSlot());
}

TEST_P(SlotPipelineTest, ManyLoneBatchesAreAnsweredInOrderWhicheverThreadAnswers) {
  if (!GetParam()) GTEST_SKIP() << "only with an issue thread";
  answer_when_idle_ = true;
  Create(2);
  // Back-to-back batches: some find the pipeline idle (answered on the issue thread), some find
  // a batch being answered (handed over); the answers stay in order either way.
  for (int i = 0; i < 40; ++i) {
    // Two slots: batch i may be taken once batch i - 2 freed its slot.
    if (i >= 2) ASSERT_TRUE(WaitForFreed(static_cast<size_t>(i - 1)));
    Execute("b" + std::to_string(i));
  }
  ASSERT_TRUE(WaitForFreed(40));
  std::vector<std::string> expected;
  for (int i = 0; i < 40; ++i) expected.push_back("answer b" + std::to_string(i));
  EXPECT_EQ(script_.Matching("answer "), expected);
  EXPECT_EQ(script_.reuse_violations, 0);
}

// answer_on_caller (the CPU executor of a model with one instance, whose scheduler's batcher
// runs its batches): Execute() is the whole pipeline, on the caller's thread.
class AnswerOnCallerTest : public SlotPipelineTest {
 protected:
  AnswerOnCallerTest() { answer_on_caller_ = true; }
};
INSTANTIATE_TEST_SUITE_P(CallerAnswers, AnswerOnCallerTest, ::testing::Values(false),
                         [](const ::testing::TestParamInfo<bool>&) { return "NoThreads"; });

TEST_P(AnswerOnCallerTest, ExecuteRunsAndAnswersTheBatchOnTheCallerBeforeItReturns) {
  Create(2);
  EXPECT_FALSE(pipeline_->ExecuteOnlyEnqueues());
  EXPECT_TRUE(pipeline_->ExecuteRunsBatch());
  for (int b = 0; b < 5; ++b) {
    const std::string name = "b" + std::to_string(b);
    Execute(name, 1 + b % 3);
    // Answered, and its slot freed, before Execute returned: nothing is left for another thread.
    EXPECT_TRUE(script_.Happened("answer " + name)) << name;
    EXPECT_EQ(pipeline_->InFlight(), 0);
    EXPECT_TRUE(pipeline_->HasFreeSlot());
    std::lock_guard<std::mutex> lock(script_.mu);
    EXPECT_EQ(script_.issue_thread[name], std::this_thread::get_id());
    EXPECT_EQ(script_.scatter_thread[name], std::this_thread::get_id());
  }
  EXPECT_THAT(script_.Matching("answer "),
              ElementsAre("answer b0", "answer b1", "answer b2", "answer b3", "answer b4"));
  // Per batch, in the pipeline's order: issue, wait, scatter, answers, then the slot freed.
  EXPECT_LT(script_.IndexOf("issue b0"), script_.IndexOf("wait b0"));
  EXPECT_LT(script_.IndexOf("wait b0"), script_.IndexOf("scatter b0"));
  EXPECT_LT(script_.IndexOf("scatter b0"), script_.IndexOf("answer b0"));
  EXPECT_LT(script_.IndexOf("answer b0"), script_.IndexOf("freed"));
  EXPECT_LT(script_.IndexOf("freed"), script_.IndexOf("enter b1"));
  ASSERT_TRUE(Result("b2", 2).ok());
  EXPECT_EQ(Result("b2", 2)->outputs.at(0).data.size(), 3u);
  EXPECT_EQ(stats_.Snapshot().success.count, 1u + 2 + 3 + 1 + 2);
  EXPECT_EQ(script_.reuse_violations, 0);
}

// The fault order holds on the caller: the faulting batch is failed INTERNAL, on_fault is called
// once, on the caller, after its answers and before its slot is freed; the executor takes nothing
// more (HasFreeSlot() false), and a batch the scheduler took before it saw that fails unrun.
TEST_P(AnswerOnCallerTest, FaultIsAnsweredAndReportedOnTheCallerInOrder) {
  script_.issue_result["b1"] = absl::InternalError("backend fault");
  Create(2);
  Execute("b0");
  Execute("b1");
  EXPECT_FALSE(pipeline_->HasFreeSlot());
  ASSERT_TRUE(Result("b0").ok());
  EXPECT_EQ(Result("b1").status().code(), absl::StatusCode::kInternal);
  ASSERT_EQ(Faults().size(), 1u);
  EXPECT_THAT(std::string(Faults()[0].message()), HasSubstr("backend fault"));
  EXPECT_LT(script_.IndexOf("answer b1"), script_.IndexOf("fault"));
  const std::vector<std::string> freed_after_fault = [&] {
    std::lock_guard<std::mutex> lock(script_.mu);
    return std::vector<std::string>(
        std::find(script_.events.begin(), script_.events.end(), "fault"), script_.events.end());
  }();
  EXPECT_THAT(freed_after_fault, ElementsAre("fault", "freed"));
  Execute("b2");  // taken before the fault was seen
  EXPECT_EQ(Result("b2").status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(script_.Happened("enter b2"));
  EXPECT_EQ(Faults().size(), 1u);
}

// Stop() from the owner while a batch runs on another thread (the batcher) answers that batch
// first, as joining an executor thread would.
TEST_P(AnswerOnCallerTest, StopWaitsForTheBatchRunningOnTheCaller) {
  script_.SetGate(&Script::wait_open, false);
  Create(2);
  std::thread batcher([this] { Execute("b0"); });
  ASSERT_TRUE(script_.WaitFor("issue b0"));
  std::atomic<bool> stopped{false};
  std::thread owner([&] {
    pipeline_->Stop();
    stopped = true;
  });
  // Stop() may not return while b0 is held in Wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(stopped.load());
  script_.SetGate(&Script::wait_open, true);
  batcher.join();
  owner.join();
  EXPECT_TRUE(stopped.load());
  EXPECT_TRUE(Result("b0").ok());
  EXPECT_EQ(pipeline_->InFlight(), 0);
  EXPECT_FALSE(pipeline_->HasFreeSlot());
}

TEST(SlotPipelineCreateTest, RejectsBadOptions) {
  Script script;
  FakeBackend backend(script, 1);
  ModelStats stats(ModelStatsOptions{.model_name = "fake"});
  SlotPipelineOptions options;
  options.executor.slot_count = 0;
  options.executor.stats = &stats;
  EXPECT_EQ(SlotPipeline::Create(backend, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.executor.slot_count = 1;
  options.executor.stats = nullptr;
  EXPECT_EQ(SlotPipeline::Create(backend, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Answering on the caller is for a pipeline whose caller issues.
  options.executor.stats = &stats;
  options.issue_thread = true;
  options.answer_on_caller = true;
  EXPECT_EQ(SlotPipeline::Create(backend, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::engine
