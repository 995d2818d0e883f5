#pragma once

// Steps the forward passes share (encoder_forward.cc's post-norm layers, encoder_modernbert.cc's
// and encoder_qwen3.cc's pre-norm ones): how a batch is cut into chunks of whole sequences and how
// row-wise kernels are split over the compute pool.

#include <algorithm>
#include <cstdint>

#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_forward.h"

namespace sluice::engine::models::encoder {

// Row-wise steps split into blocks of at least this many rows (a LayerNorm row of 384 floats is
// ~0.1 us: smaller blocks cost more to hand over than to compute).
inline constexpr int64_t kMinRowsPerTask = 16;

// Runs fn(row_begin, row_count) over [0, rows) in blocks, on the pool where there is one: the
// row-wise kernels (LayerNorm, bias + activation), whose rows are independent.
template <typename Fn>
void ForRowBlocks(ComputePool* pool, int64_t rows, int64_t min_rows, const Fn& fn) {
  const int threads = pool == nullptr ? 1 : pool->threads();
  const int64_t blocks =
      std::clamp<int64_t>(rows / std::max<int64_t>(min_rows, 1), 1, int64_t{threads} * 2);
  if (threads == 1 || blocks == 1) {
    fn(int64_t{0}, rows);
    return;
  }
  pool->ParallelFor(static_cast<int>(blocks), [&](int task, int) {
    const int64_t begin = rows * task / blocks;
    const int64_t end = rows * (task + 1) / blocks;
    fn(begin, end - begin);
  });
}

// Runs fn(head, begin, n, worker) for every head of every sequence of the chunk [first, end):
// begin is the sequence's first token counted from the chunk's, n its tokens; over the pool where
// there is one (worker: the pool's worker, whose attention scratch fn uses), else in order on the
// calling thread (worker 0). Attention's split in all three forward passes.
template <typename Fn>
void ForEachSequenceHead(ComputePool* pool, const PackedBatch& batch, int first, int end, int heads,
                         const Fn& fn) {
  const int64_t t0 = batch.offsets[first];
  const auto task_fn = [&](int task, int worker) {
    const int s = first + task / heads;
    fn(task % heads, batch.offsets[s] - t0,
       static_cast<int>(batch.offsets[s + 1] - batch.offsets[s]), worker);
  };
  const int tasks = (end - first) * heads;
  if (pool != nullptr) {
    pool->ParallelFor(tasks, task_fn);
  } else {
    for (int task = 0; task < tasks; ++task) task_fn(task, 0);
  }
}

// Rotary position embedding of one head's vector `x` [2 x half] in place, transformers'
// rotate_half form (ModernBERT's and Qwen3's): pairs (i, i + half) turned by the angle whose cos
// and sin are the RopeTable row of the token's position.
inline void RotateHalf(float* x, const float* cos, const float* sin, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = x[i];
    const float b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

// The sequences [first, end) of the next chunk: whole sequences while they fit in `budget`
// tokens, and always at least one (a longer sequence is a chunk of its own).
int ChunkEnd(const PackedBatch& batch, int first, int64_t budget);

// The longest sequence of `batch` and the most tokens of one of its chunks of `budget` tokens.
void ChunkSizes(const PackedBatch& batch, int64_t budget, int64_t* longest, int64_t* widest);

}  // namespace sluice::engine::models::encoder
