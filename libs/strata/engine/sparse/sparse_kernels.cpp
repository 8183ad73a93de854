// Fused CPU kernels of the sparse decode path (strata.engine.sparse.native). Both read the cache
// and the index in place, by block id, as strata's decode_attention kernel does: gathering the
// selected blocks or a row's index entries first would copy every byte read, and on the CPU the
// sparse path is bound by memory traffic, not arithmetic.
//
//   block_scores      rows [KVH, R, Q, E] x entries [KVH, NB, E] at ids [R, M] -> [KVH, R, Q, M]
//   sparse_attention  pairs over their own block lists (flat ids into the cache seen as
//                     KVH * NB blocks), reading the first block_lens[p, b] tokens of each
//                     block -> the output [P, G, D] and log sum exp of the scores [P, G]
//
// The helpers (widening, dot, axpy, exp of a non-positive float) are shared with strata's
// decode_attention kernel: strata/engine/kernels/cpu_math.h, with their accuracy.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace {

#include "cpu_math.h"

template <typename scalar_t, int64_t kE>
void block_scores_impl(const at::Tensor& rows, const at::Tensor& entries, const at::Tensor& ids,
                       at::Tensor& out) {
  const int64_t kv_heads = rows.size(0), r = rows.size(1), nq = rows.size(2);
  const int64_t e = kE > 0 ? kE : rows.size(3);
  const int64_t nb = entries.size(1), m = ids.size(1);
  const float* rp = rows.data_ptr<float>();
  const scalar_t* ep = entries.data_ptr<scalar_t>();
  const int64_t* ip = ids.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  constexpr int64_t kChunk = 256;   // blocks per task: enough work to amortize the task
  const int64_t chunks = (m + kChunk - 1) / kChunk;
  at::parallel_for(0, kv_heads * r * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(e);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item % chunks, hr = item / chunks, s = hr % r, h = hr / r;
      const float* q = rp + hr * nq * e;
      float* o = op + hr * nq * m;
      const int64_t* sid = ip + s * m;
      for (int64_t j = c * kChunk; j < std::min(m, (c + 1) * kChunk); ++j) {
        widen_row(ep + (h * nb + sid[j]) * e, row.data(), e);
        for (int64_t g = 0; g < nq; ++g) o[g * m + j] = dot(q + g * e, row.data(), e);
      }
    }
  });
}

// kDim > 0 fixes head_dim at compile time (the common 64 and 128) so the per-key loops unroll
// into straight vector code, as in decode_attention; kDim == 0 handles any other size.
template <typename scalar_t, int64_t kDim>
void sparse_attention_impl(const at::Tensor& q, const at::Tensor& k_flat, const at::Tensor& v_flat,
                           const at::Tensor& tables, const at::Tensor& block_lens, double scale,
                           at::Tensor& out, at::Tensor& lse) {
  const int64_t pairs = q.size(0), group = q.size(1), dim = kDim > 0 ? kDim : q.size(2);
  const int64_t block_size = k_flat.size(1), width = tables.size(1);
  const float fscale = static_cast<float>(scale);
  const scalar_t* qp = q.data_ptr<scalar_t>();
  const scalar_t* kp = k_flat.data_ptr<scalar_t>();
  const scalar_t* vp = v_flat.data_ptr<scalar_t>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* lp = block_lens.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  float* sp = lse.data_ptr<float>();
  const int64_t k_block = k_flat.stride(0), k_slot = k_flat.stride(1);
  const int64_t v_block = v_flat.stride(0), v_slot = v_flat.stride(1);

  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(group * dim), acc(group * dim), row(dim), scores, sums(group);
    for (int64_t p = begin; p < end; ++p) {
      const int64_t* table = tp + p * width;
      const int64_t* lens = lp + p * width;
      int64_t total = 0;
      for (int64_t b = 0; b < width; ++b) total += lens[b];
      // scores key-major ([token][group]) so a key's G scores sit together
      for (int64_t g = 0; g < group; ++g)
        widen_row(qp + (p * group + g) * dim, qf.data() + g * dim, dim);
      scores.resize(group * std::max<int64_t>(total, 1));
      int64_t t = 0;
      for (int64_t b = 0; b < width; ++b) {
        const scalar_t* kblock = kp + table[b] * k_block;
        for (int64_t j = 0; j < lens[b]; ++j, ++t) {
          widen_row(kblock + j * k_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            scores[t * group + g] = dot(qf.data() + g * dim, row.data(), dim) * fscale;
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < total; ++i) {
          const float v = scores[i * group + g];
          mx = v > mx ? v : mx;
        }
        float sum = 0.f;
        for (int64_t i = 0; i < total; ++i) {
          const float e = exp_nonpositive(scores[i * group + g] - mx);
          scores[i * group + g] = e;
          sum += e;
        }
        sums[g] = sum;
        sp[p * group + g] = total > 0 ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      t = 0;
      for (int64_t b = 0; b < width; ++b) {
        const scalar_t* vblock = vp + table[b] * v_block;
        for (int64_t j = 0; j < lens[b]; ++j, ++t) {
          widen_row(vblock + j * v_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            axpy(scores[t * group + g], row.data(), acc.data() + g * dim, dim);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* a = acc.data() + g * dim;
        const float inv = sums[g] > 0.f ? 1.f / sums[g] : 0.f;
        for (int64_t i = 0; i < dim; ++i) a[i] *= inv;
        store_row(a, op + (p * group + g) * dim, dim);
      }
    }
  });
}

template <typename scalar_t>
void dispatch_dim(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& tables, const at::Tensor& lens, double scale, at::Tensor& out,
                  at::Tensor& lse) {
  switch (q.size(2)) {
    case 64: sparse_attention_impl<scalar_t, 64>(q, k, v, tables, lens, scale, out, lse); break;
    case 128: sparse_attention_impl<scalar_t, 128>(q, k, v, tables, lens, scale, out, lse); break;
    default: sparse_attention_impl<scalar_t, 0>(q, k, v, tables, lens, scale, out, lse);
  }
}

at::Tensor block_scores(const at::Tensor& rows, const at::Tensor& entries, const at::Tensor& ids) {
  TORCH_CHECK(rows.device().is_cpu(), "strata_sparse::block_scores runs on the CPU only");
  TORCH_CHECK(rows.dim() == 4 && rows.scalar_type() == at::kFloat,
              "rows must be float32 [KVH, R, Q, E]");
  TORCH_CHECK(entries.dim() == 3 && entries.size(0) == rows.size(0) &&
              entries.size(2) == rows.size(3), "entries must be [KVH, NB, E] matching rows");
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == rows.size(1) && ids.scalar_type() == at::kLong,
              "ids must be int64 [R, M]");
  auto rc = rows.contiguous();
  auto ec = entries.contiguous();
  auto ic = ids.contiguous();
  const int64_t* ip = ic.data_ptr<int64_t>();
  for (int64_t i = 0; i < ic.numel(); ++i)
    TORCH_CHECK(ip[i] >= 0 && ip[i] < ec.size(1), "block id ", ip[i], " is outside the index's ",
                ec.size(1), " blocks");
  auto out = at::empty({rc.size(0), rc.size(1), rc.size(2), ic.size(1)}, rc.options());
  const bool d64 = rc.size(3) == 3 * 64;
  switch (ec.scalar_type()) {
    case at::kFloat:
      d64 ? block_scores_impl<float, 3 * 64>(rc, ec, ic, out)
          : block_scores_impl<float, 0>(rc, ec, ic, out);
      break;
    case at::kBFloat16:
      d64 ? block_scores_impl<c10::BFloat16, 3 * 64>(rc, ec, ic, out)
          : block_scores_impl<c10::BFloat16, 0>(rc, ec, ic, out);
      break;
    default: TORCH_CHECK(false, "index entries must be float32 or bfloat16");
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> sparse_attention(
    const at::Tensor& q, const at::Tensor& k_flat, const at::Tensor& v_flat,
    const at::Tensor& tables, const at::Tensor& block_lens, double scale) {
  TORCH_CHECK(q.device().is_cpu(), "strata_sparse::sparse_attention runs on the CPU only");
  TORCH_CHECK(q.dim() == 3 && k_flat.dim() == 3 && v_flat.dim() == 3,
              "expected q [P,G,D] and caches [blocks, BS, D]");
  TORCH_CHECK(k_flat.sizes() == v_flat.sizes(), "k and v caches differ in shape");
  TORCH_CHECK(q.scalar_type() == k_flat.scalar_type() && q.scalar_type() == v_flat.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(q.size(2) == k_flat.size(2), "head_dim of q and the caches differ");
  TORCH_CHECK(k_flat.stride(2) == 1 && v_flat.stride(2) == 1, "cache rows must be contiguous");
  TORCH_CHECK(tables.dim() == 2 && tables.sizes() == block_lens.sizes() &&
              tables.size(0) == q.size(0) && tables.scalar_type() == at::kLong &&
              block_lens.scalar_type() == at::kLong,
              "tables and block_lens must be int64 [P, B], one row per pair");
  auto qc = q.contiguous();
  auto tc = tables.contiguous();
  auto lc = block_lens.contiguous();
  const int64_t* tp = tc.data_ptr<int64_t>();
  const int64_t* lp = lc.data_ptr<int64_t>();
  for (int64_t i = 0; i < tc.numel(); ++i) {
    TORCH_CHECK(tp[i] >= 0 && tp[i] < k_flat.size(0), "block id ", tp[i],
                " is outside the cache's ", k_flat.size(0), " blocks");
    TORCH_CHECK(lp[i] >= 0 && lp[i] <= k_flat.size(1), "block length ", lp[i],
                " is outside [0, ", k_flat.size(1), "]");
  }
  auto out = at::empty_like(qc);
  auto lse = at::empty({qc.size(0), qc.size(1)}, qc.options().dtype(at::kFloat));
  switch (q.scalar_type()) {
    case at::kFloat:
      dispatch_dim<float>(qc, k_flat, v_flat, tc, lc, scale, out, lse);
      break;
    case at::kBFloat16:
      dispatch_dim<c10::BFloat16>(qc, k_flat, v_flat, tc, lc, scale, out, lse);
      break;
    default:
      TORCH_CHECK(false, "strata_sparse::sparse_attention supports float32 and bfloat16");
  }
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY(strata_sparse, m) {
  m.def("block_scores(Tensor rows, Tensor entries, Tensor ids) -> Tensor");
  m.def("sparse_attention(Tensor q, Tensor k_flat, Tensor v_flat, Tensor tables, "
        "Tensor block_lens, float scale) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(strata_sparse, CPU, m) {
  m.impl("block_scores", &block_scores);
  m.impl("sparse_attention", &sparse_attention);
}
