// The softmax of a prefill tile's attention scores, one pass a row: scores [KVH, S, R, keys]
// (float32 or bfloat16, R = query heads per KV head x the tile's queries, a row's query index
// being its row index mod visible.size(1)) and visible [S, Q] int64, how many leading keys query
// q of sequence s sees (causal and within its context: attention.py's Group.visible). A row's
// probabilities are softmax(scale x its first `visible` scores), in float32, then rounded to the
// scores' dtype; every later key gets 0. That is what attention.py's torch expression computes
// (widen, scale, add the additive -inf mask, softmax, round), in one pass over the row where the
// expression makes five over the whole tile; exp is cpu_math.h's exp_nonpositive (2.3e-7
// relative), so the probabilities agree within float32 rounding, not bit for bit.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

#include "cpu_math.h"

template <typename T>
void rows_softmax(const at::Tensor& scores, const at::Tensor& visible, float scale,
                  at::Tensor& out) {
  const int64_t keys = scores.size(3), per_seq = scores.size(2), seqs = scores.size(1);
  const int64_t queries = visible.size(1);
  const int64_t rows = scores.numel() / keys;
  const T* in = scores.data_ptr<T>();
  T* dst = out.data_ptr<T>();
  const int64_t* vis = visible.data_ptr<int64_t>();
  at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(keys);
    float* b = buf.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t s = (r / per_seq) % seqs, q = r % queries;
      const int64_t n = std::min(vis[s * queries + q], keys);
      TORCH_CHECK(n >= 1, "query ", q, " of sequence ", s, " sees no key");
      widen_row(in + r * keys, b, n);
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t i = 0; i < n; ++i) {
        b[i] *= scale;
        mx = std::max(mx, b[i]);
      }
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) {
        b[i] = exp_nonpositive(b[i] - mx);
        sum += b[i];
      }
      const float inv = 1.f / sum;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) b[i] *= inv;
      T* o = dst + r * keys;
      store_row(b, o, n);
      std::fill(o + n, o + keys, T(0.f));
    }
  });
}

at::Tensor prefix_softmax(const at::Tensor& scores, const at::Tensor& visible, double scale) {
  TORCH_CHECK(scores.dim() == 4, "scores must be [kv_heads, sequences, rows, keys]");
  TORCH_CHECK(scores.scalar_type() == at::kFloat || scores.scalar_type() == at::kBFloat16,
              "scores must be float32 or bfloat16");
  TORCH_CHECK(visible.dim() == 2 && visible.scalar_type() == at::kLong &&
                  visible.size(0) == scores.size(1),
              "visible must be int64 [sequences, queries] with the scores' sequences");
  TORCH_CHECK(visible.size(1) >= 1 && scores.size(2) % visible.size(1) == 0,
              "the scores' rows must be whole groups of the visible queries");
  const at::Tensor in = scores.contiguous(), vis = visible.contiguous();
  at::Tensor out = at::empty_like(in);
  if (in.numel() == 0) return out;
  if (in.scalar_type() == at::kFloat)
    rows_softmax<float>(in, vis, static_cast<float>(scale), out);
  else
    rows_softmax<c10::BFloat16>(in, vis, static_cast<float>(scale), out);
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_softmax, m) {
  m.def("prefix_softmax(Tensor scores, Tensor visible, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_softmax, CPU, m) {
  m.impl("prefix_softmax", &prefix_softmax);
}
