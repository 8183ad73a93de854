// Fused paged decode attention for the CPU: one new query token per sequence attends over its
// blocks of the KV cache, read in place through the block table (no gather copy, no padded mask,
// no dtype round trips). Work is split over (sequence, kv head) with at::parallel_for so it runs
// on torch's own thread pool; spawning threads or linking a second OpenMP runtime here would make
// the two pools spin against each other.
//
// Inner loops run over head_dim in float; reductions are OpenMP simd reductions so GCC vectorizes
// them without -ffast-math. bfloat16 is widened by a 16-bit shift, which is exact.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

#include "cpu_math.h"

// kDim > 0 fixes head_dim at compile time (the common 64 and 128), so the per-key loops unroll
// into straight vector code; kDim == 0 handles any other size.
template <typename scalar_t, int64_t kDim>
void decode_attention_impl(const at::Tensor& q, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& block_tables,
                           const at::Tensor& context_lens, double scale, at::Tensor& out) {
  const int64_t seqs = q.size(0), heads = q.size(1);
  const int64_t dim = kDim > 0 ? kDim : q.size(2);
  const int64_t kv_heads = k_cache.size(0), block_size = k_cache.size(2);
  const int64_t width = block_tables.size(1);
  const int64_t group = heads / kv_heads;
  const float fscale = static_cast<float>(scale);

  const scalar_t* qp = q.data_ptr<scalar_t>();
  const scalar_t* kp = k_cache.data_ptr<scalar_t>();
  const scalar_t* vp = v_cache.data_ptr<scalar_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  // caches may be views into the pool tensor: honour their strides (the row itself is contiguous)
  const int64_t k_head = k_cache.stride(0), k_block = k_cache.stride(1), k_slot = k_cache.stride(2);
  const int64_t v_head = v_cache.stride(0), v_block = v_cache.stride(1), v_slot = v_cache.stride(2);

  at::parallel_for(0, seqs * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(group * dim), acc(group * dim), row(dim), scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / kv_heads, kh = item % kv_heads;
      const int64_t ctx = lens[s];
      const int64_t* table = tables + s * width;
      for (int64_t g = 0; g < group; ++g)
        widen_row(qp + (s * heads + kh * group + g) * dim, qf.data() + g * dim, dim);
      scores.resize(group * ctx);

      // pass 1: scaled scores, one key row widened once and shared by the G query heads
      const scalar_t* kbase = kp + kh * k_head;
      for (int64_t t0 = 0; t0 < ctx; t0 += block_size) {
        const scalar_t* kblock = kbase + table[t0 / block_size] * k_block;
        const int64_t n = std::min(block_size, ctx - t0);
        for (int64_t j = 0; j < n; ++j) {
          widen_row(kblock + j * k_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            scores[g * ctx + t0 + j] = dot(qf.data() + g * dim, row.data(), dim) * fscale;
        }
      }
      // softmax numerators in place; the normalisation is applied once to the output rows
      std::vector<float> sums(group);
      for (int64_t g = 0; g < group; ++g) {
        float* sc = scores.data() + g * ctx;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < ctx; ++t) mx = sc[t] > mx ? sc[t] : mx;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < ctx; ++t) {
          sc[t] = exp_nonpositive(sc[t] - mx);
          sum += sc[t];
        }
        sums[g] = sum;
      }
      // pass 2: weighted sum of values
      std::fill(acc.begin(), acc.end(), 0.f);
      const scalar_t* vbase = vp + kh * v_head;
      for (int64_t t0 = 0; t0 < ctx; t0 += block_size) {
        const scalar_t* vblock = vbase + table[t0 / block_size] * v_block;
        const int64_t n = std::min(block_size, ctx - t0);
        for (int64_t j = 0; j < n; ++j) {
          widen_row(vblock + j * v_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            axpy(scores[g * ctx + t0 + j], row.data(), acc.data() + g * dim, dim);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* a = acc.data() + g * dim;
        const float inv = sums[g] > 0.f ? 1.f / sums[g] : 0.f;
        for (int64_t i = 0; i < dim; ++i) a[i] *= inv;
        store_row(a, op + (s * heads + kh * group + g) * dim, dim);
      }
    }
  });
}

template <typename scalar_t>
void dispatch_dim(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                  const at::Tensor& tables, const at::Tensor& lens, double scale, at::Tensor& out) {
  switch (q.size(2)) {
    case 64:
      decode_attention_impl<scalar_t, 64>(q, k_cache, v_cache, tables, lens, scale, out);
      break;
    case 128:
      decode_attention_impl<scalar_t, 128>(q, k_cache, v_cache, tables, lens, scale, out);
      break;
    default:
      decode_attention_impl<scalar_t, 0>(q, k_cache, v_cache, tables, lens, scale, out);
  }
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& block_tables,
                            const at::Tensor& context_lens, double scale) {
  TORCH_CHECK(q.device().is_cpu(), "strata::decode_attention runs on the CPU only");
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.dim() == 4,
              "expected q [S,H,D] and caches [KVH,NB,BS,D]");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "k_cache and v_cache shapes differ");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.scalar_type() == v_cache.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(q.size(2) == k_cache.size(3), "head_dim of q and the caches differ");
  TORCH_CHECK(q.size(1) % k_cache.size(0) == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(k_cache.stride(3) == 1 && v_cache.stride(3) == 1, "cache rows must be contiguous");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && context_lens.scalar_type() == at::kLong,
              "block_tables and context_lens must be int64");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == q.size(0) &&
              context_lens.numel() == q.size(0), "one block table row and length per sequence");
  auto qc = q.contiguous();
  auto tables = block_tables.contiguous();
  auto lens = context_lens.contiguous();
  const int64_t capacity = tables.size(1) * k_cache.size(2);
  const int64_t* lp = lens.data_ptr<int64_t>();
  for (int64_t s = 0; s < lens.numel(); ++s)
    TORCH_CHECK(lp[s] >= 1 && lp[s] <= capacity, "context length ", lp[s], " of sequence ", s,
                " is outside [1, ", capacity, "] for its block table");
  const int64_t* tp = tables.data_ptr<int64_t>();
  for (int64_t i = 0; i < tables.numel(); ++i)
    TORCH_CHECK(tp[i] >= 0 && tp[i] < k_cache.size(1), "block id ", tp[i],
                " is outside the cache's ", k_cache.size(1), " blocks");
  auto out = at::empty_like(qc);
  switch (q.scalar_type()) {
    case at::kFloat:
      dispatch_dim<float>(qc, k_cache, v_cache, tables, lens, scale, out);
      break;
    case at::kBFloat16:
      dispatch_dim<c10::BFloat16>(qc, k_cache, v_cache, tables, lens, scale, out);
      break;
    default:
      TORCH_CHECK(false, "strata::decode_attention supports float32 and bfloat16, got ",
                  q.scalar_type());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(strata, m) {
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor context_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata, CPU, m) {
  m.impl("decode_attention", &decode_attention);
}
