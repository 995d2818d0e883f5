#include "engine/preparation_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::engine {

absl::StatusOr<std::unique_ptr<PreparationPool>> PreparationPool::Create(
    PreparationPoolOptions options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("preparation pool: threads must be >= 1, not ", options.threads));
  }
  if (options.max_queue < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("preparation pool: max_queue must be >= 1, not ", options.max_queue));
  }
  std::unique_ptr<PreparationPool> pool(new PreparationPool(options));
  for (int i = 0; i < options.threads; ++i) {
    pool->threads_.emplace_back([p = pool.get()] { p->Work(); });
  }
  return pool;
}

PreparationPool::PreparationPool(PreparationPoolOptions options) : options_(options) {}

PreparationPool::~PreparationPool() { Stop(); }

absl::Status PreparationPool::TrySubmit(Job& job) {
  {
    common::MutexLock lock(&mu_);
    if (stopping_) {
      return absl::UnavailableError("server is shutting down; not accepting requests");
    }
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the tokenization queue is full (", options_.max_queue, " requests wait for ",
          options_.threads, " tokenizer threads; --tokenizer-queue-size / --tokenizer-threads)"));
    }
    queue_.push_back(std::move(job));
  }
  cv_.Signal();
  return absl::OkStatus();
}

bool PreparationPool::Idle() const {
  common::MutexLock lock(&mu_);
  return queue_.empty() && running_ == 0;
}

void PreparationPool::Work() {
  for (;;) {
    Job job;
    {
      common::MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    job();
    job = nullptr;  // release what it captured before counting it done
    common::MutexLock lock(&mu_);
    --running_;
  }
}

void PreparationPool::Stop() {
  common::MutexLock stop_lock(&stop_mu_);
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

}  // namespace sluice::engine
