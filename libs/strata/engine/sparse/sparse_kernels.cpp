// Fused CPU kernels of the sparse decode path (strata.engine.sparse.native). Both read the cache
// and the index in place, by block id, as strata's decode_attention kernel does: gathering the
// selected blocks or a row's index entries first would copy every byte read, and on the CPU the
// sparse path is bound by memory traffic, not arithmetic.
//
//   select_blocks     queries [R * KVH, G, D] (pair-major, float32 or bfloat16) x entries
//                     [KVH, NB, 2D or 3D] at each row's middle blocks, ranked and cut to the
//                     row's budget in one pass -> the blocks each pair reads (physical ids, and
//                     flat ids into the cache seen as KVH * NB blocks) and the log of the
//                     estimated mass of the middle blocks it leaves out, by the trust check's
//                     estimate and (with comp, entries 3D) by compensation's (select.py's
//                     selection, without a dozen small tensor operations per layer)
//   sparse_attention  pairs over their own block lists (flat ids into the cache seen as
//                     KVH * NB blocks), reading the first block_lens[p, b] tokens of each
//                     block -> the output [P, G, D] and log sum exp of the scores [P, G]
//   compensate        the selection's output [P, G, D] moved towards the left-out tokens' mean
//                     value by compensation's estimate of the mass left out (compensate.py's
//                     LeftOut.apply in one pass instead of a handful of small tensor operations)
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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

#include "cpu_math.h"

// The range-based variance of a block's keys from its box, ((kmax - kmin) / sigmas)^2 per
// dimension, with index.py's spread_of float operations: row [kmax | kmin] -> out [spread].
inline void spread_row(const float* row, int64_t dim, float sigmas, float* out) {
  for (int64_t i = 0; i < dim; ++i) {
    const float d = (row[i] - row[dim + i]) / sigmas;
    out[i] = d * d;
  }
}

// comp_terms64 for any head_dim, over an entry laid out [kmax | kmin | spread | var] in float.
inline void comp_terms(const float* hi, const float* qb, const float* w, int64_t e, int64_t dim,
                       int64_t group, float* out3) {
  const float *lo = hi + dim, *sp = hi + 2 * dim, *vr = hi + 3 * dim;
  for (int64_t g = 0; g < group; ++g) {
    const float* b_row = qb + g * e;
    const float* w_row = w + g * e;
    float b = 0.f, c = 0.f, ms = 0.f, cv = 0.f;
#pragma omp simd reduction(+ : b, c, ms, cv)
    for (int64_t i = 0; i < dim; ++i) {
      b += b_row[i] * hi[i] + b_row[dim + i] * lo[i];
      c += w_row[i] * (hi[i] + lo[i]);
      ms += w_row[2 * dim + i] * sp[i];
      cv += w_row[2 * dim + i] * vr[i];
    }
    out3[3 * g] = b;
    out3[3 * g + 1] = c + ms;
    out3[3 * g + 2] = c + cv;
  }
}

#if defined(__AVX512F__)
// 16 floats of an index entry, widened from bfloat16 by the same exact shift as widen_row
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
// One entry [kmax | kmin | var] (head_dim 64) against every query head's rows: per head the
// bound, the trust check's exponent (center term plus spread term) and compensation's (center
// term plus var term), 16 dimensions at a time with one reduction each at the end, the entry
// widened once for all heads (out3: 3 numbers a head). The spread term is taken as
// (kmax - kmin)^2 against the row's q^2 / (2 sigmas^2) (`w3`), the same product as spread_row's
// without a division per block.
template <typename scalar_t>
inline void comp_terms64(const scalar_t* entry, const float* qb, const float* w,
                         const float* w3, int64_t e, int64_t group, float* out3) {
  __m512 hi[4], lo[4], sq[4], vr[4], mid[4];
  for (int k = 0; k < 4; ++k) {
    hi[k] = load16(entry + 16 * k);
    lo[k] = load16(entry + 64 + 16 * k);
    vr[k] = load16(entry + 128 + 16 * k);
    mid[k] = _mm512_add_ps(hi[k], lo[k]);
    const __m512 d = _mm512_sub_ps(hi[k], lo[k]);
    sq[k] = _mm512_mul_ps(d, d);
  }
  for (int64_t g = 0; g < group; ++g) {
    const float* b_row = qb + g * e;
    const float* w_row = w + g * e;
    const float* w3_row = w3 + g * 64;
    __m512 b = _mm512_setzero_ps(), tm = _mm512_setzero_ps(), cm = _mm512_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      b = _mm512_fmadd_ps(_mm512_loadu_ps(b_row + 16 * k), hi[k], b);
      b = _mm512_fmadd_ps(_mm512_loadu_ps(b_row + 64 + 16 * k), lo[k], b);
      const __m512 center = _mm512_mul_ps(_mm512_loadu_ps(w_row + 16 * k), mid[k]);
      tm = _mm512_fmadd_ps(_mm512_loadu_ps(w3_row + 16 * k), sq[k], _mm512_add_ps(tm, center));
      cm = _mm512_fmadd_ps(_mm512_loadu_ps(w_row + 128 + 16 * k), vr[k],
                           _mm512_add_ps(cm, center));
    }
    out3[3 * g] = _mm512_reduce_add_ps(b);
    out3[3 * g + 1] = _mm512_reduce_add_ps(tm);
    out3[3 * g + 2] = _mm512_reduce_add_ps(cm);
  }
}
#endif

// Selected blocks (and a row's index entries) lie anywhere in the cache, where the hardware
// prefetcher cannot guess the next one: ask for the next rows while these are read. Attention
// asks kAhead blocks ahead: one block's 16 tokens take less time than a read from memory.
constexpr int64_t kAhead = 2;
template <typename scalar_t>
inline void prefetch_block(const scalar_t* block, int64_t rows, int64_t slot, int64_t dim) {
  constexpr int64_t kLine = 64 / sizeof(scalar_t);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t i = 0; i < dim; i += kLine) __builtin_prefetch(block + j * slot + i, 0, 3);
}

// kD > 0 fixes head_dim at compile time (64), so the dot products' lengths are constants.
template <typename scalar_t, int64_t kD>
void select_impl(const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
                 const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed,
                 int64_t picks, double scale, bool moment, double log_block, bool comp,
                 double range_sigmas, at::Tensor& ids, at::Tensor& flat, at::Tensor& log_left,
                 at::Tensor& log_comp) {
  const int64_t kv_heads = entries.size(0), pairs = queries.size(0), group = queries.size(1);
  const int64_t dim = kD > 0 ? kD : queries.size(2), nq = moment || comp ? 2 * group : group;
  // an entry holds e numbers, [kmax | kmin (| var)]; the query rows and the widened entry are
  // qe wide, [kmax | kmin | spread (| var)], the spread computed from the box per block
  const int64_t e = entries.size(2), qe = e + dim;
  const float sigmas = static_cast<float>(range_sigmas);
  const int64_t nb = entries.size(1), m = mid_ids.size(1), nf = fixed.size(1);
  // the pairs' queries, float32 or bfloat16 (widened exactly, as the entries are)
  const bool q_bf16 = queries.scalar_type() == at::kBFloat16;
  const float* q32 = q_bf16 ? nullptr : queries.data_ptr<float>();
  const c10::BFloat16* q16 = q_bf16 ? queries.data_ptr<c10::BFloat16>() : nullptr;
  const float fscale = static_cast<float>(scale);
  const scalar_t* ep = entries.data_ptr<scalar_t>();
  const int64_t* mp = mid_ids.data_ptr<int64_t>();
  const int64_t* cp = counts.data_ptr<int64_t>();
  const int64_t* kp = takes.data_ptr<int64_t>();
  const int64_t* fp = fixed.data_ptr<int64_t>();
  int64_t* op = ids.data_ptr<int64_t>();
  int64_t* fo = flat.data_ptr<int64_t>();
  float* lp = log_left.data_ptr<float>();
  float* cp_out = comp ? log_comp.data_ptr<float>() : nullptr;
  const float lb = static_cast<float>(log_block);
  const float neg = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(qe), qrows(nq * qe), bound(group * m), mass(group * m), rank(m),
        best(group), cmass(comp ? group * m : 0), terms(comp ? 3 * group : 0), qs(group * dim),
        w3rows(comp ? group * dim : 0);
    std::vector<int64_t> order(m);
    for (int64_t item = begin; item < end; ++item) {
      // pair item = row s * kv_heads + KV head h
      const int64_t h = item % kv_heads, s = item / kv_heads, count = cp[s], take = kp[s];
      // rows whose products with [kmax | kmin | spread (| var)] give the bound on
      // the scores, [relu(q) | min(q, 0) | 0], and the log-normal exponent, [q/2 | q/2 | q^2/2]
      // (select.py's query_rows); compensation's exponent is the second row's [q/2 | q/2]
      // against [kmax | kmin] plus its q^2/2 against var. Without comp the products are the
      // dot products select.py's matrix product takes; with comp one pass over the entry gives
      // every head's four sums (16 lanes at a time with AVX-512, comp_terms64), in another
      // order (equal to within float rounding, tested)
      if (q_bf16) widen_row(q16 + item * group * dim, qs.data(), group * dim);
      else widen_row(q32 + item * group * dim, qs.data(), group * dim);
      for (int64_t g = 0; g < group; ++g) {
        float* b = qrows.data() + g * qe;
        float* w = qrows.data() + (group + g) * qe;
        for (int64_t i = 0; i < dim; ++i) {
          const float x = qs[g * dim + i] * fscale;
          b[i] = x > 0.f ? x : 0.f;
          b[dim + i] = x < 0.f ? x : 0.f;
          b[2 * dim + i] = 0.f;
          if (moment || comp) {
            const float half = x * 0.5f;
            w[i] = half;
            w[dim + i] = half;
            w[2 * dim + i] = x * half;
            if (comp) w3rows[g * dim + i] = x * half / (sigmas * sigmas);
          }
        }
      }
      const float* q = qrows.data();
      const int64_t* sid = mp + s * m;
      std::fill(best.begin(), best.end(), neg);
      for (int64_t j = 0; j < count; ++j) {
        if (j + 2 < count) prefetch_block(ep + (h * nb + sid[j + 2]) * e, 1, e, e);
        if (comp) {
          // one pass over the entry for every number a head needs: the bound, the center's
          // exponent (shared by both estimates), and the spread's and the var's terms
          float* t3 = terms.data();
#if defined(__AVX512F__)
          if (kD == 64) {
            comp_terms64(ep + (h * nb + sid[j]) * e, q, q + group * qe, w3rows.data(), qe,
                         group, t3);
          } else
#endif
          {
            const scalar_t* entry = ep + (h * nb + sid[j]) * e;
            widen_row(entry, row.data(), 2 * dim);
            spread_row(row.data(), dim, sigmas, row.data() + 2 * dim);
            widen_row(entry + 2 * dim, row.data() + 3 * dim, dim);
            comp_terms(row.data(), q, q + group * qe, qe, dim, group, t3);
          }
          for (int64_t g = 0; g < group; ++g) {
            const float b = t3[3 * g];
            bound[g * m + j] = b;
            best[g] = b > best[g] ? b : best[g];
            mass[g * m + j] = (moment ? std::min(t3[3 * g + 1], b) : b) + lb;
            cmass[g * m + j] = std::min(t3[3 * g + 2], b) + lb;
          }
          continue;
        }
        widen_row(ep + (h * nb + sid[j]) * e, row.data(), e);
        if (moment) spread_row(row.data(), dim, sigmas, row.data() + 2 * dim);
        for (int64_t g = 0; g < group; ++g) {
          const float* w = q + (group + g) * qe;
          // the bound row's last third is zeros: [kmax | kmin] is all it reads
          const float b = dot(q + g * qe, row.data(), 2 * dim);
          bound[g * m + j] = b;
          best[g] = b > best[g] ? b : best[g];
          const float est = moment ? std::min(dot(w, row.data(), 3 * dim), b) : b;
          mass[g * m + j] = est + lb;
        }
      }
      // a block's rank: its best query head's bound relative to that head's best block, so a
      // head whose scores are all large does not outrank the others
      for (int64_t j = 0; j < count; ++j) {
        float v = neg;
        for (int64_t g = 0; g < group; ++g) v = std::max(v, bound[g * m + j] - best[g]);
        rank[j] = v;
      }
      for (int64_t j = 0; j < count; ++j) order[j] = j;
      const int64_t top = std::min(picks, count);
      const auto before = [&](int64_t a, int64_t b) {
        return rank[a] > rank[b] || (rank[a] == rank[b] && a < b);
      };
      // the best `read` first (linear), then in position order: a fresh sequence's blocks lie
      // in the pool in position order, so the reads go forward through memory and the
      // hardware prefetcher follows them (attention does not depend on the order); picks past
      // `read` are padding, read for 0 tokens
      const int64_t read = std::min(top, take);
      if (read < count) std::nth_element(order.begin(), order.begin() + read,
                                         order.begin() + count, before);
      std::sort(order.begin(), order.begin() + read);
      int64_t* out = op + item * (nf + picks);
      for (int64_t f = 0; f < nf; ++f) out[f] = fp[s * nf + f];
      for (int64_t k = 0; k < picks; ++k) {
        // past the row's own budget a pick is padding (read for 0 tokens); past its middle
        // blocks it is block 0, as select.py pads
        out[nf + k] = k < top ? sid[order[k]] : 0;
      }
      // the same blocks as ids into the cache seen as KVH * NB blocks (attend.flat_ids)
      int64_t* flat_out = fo + item * (nf + picks);
      for (int64_t k = 0; k < nf + picks; ++k) flat_out[k] = out[k] + h * nb;
      // log sum exp of a head's log masses over the blocks left out (-inf: none); the blocks
      // read are set to -inf first (their masses are not needed again), so both passes run
      // over plain arrays and vectorize
      const auto left_out = [&](float* lm) {
        for (int64_t k = 0; k < read; ++k) lm[order[k]] = neg;
        float mx = neg;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < count; ++j) mx = lm[j] > mx ? lm[j] : mx;
        if (mx == neg) return neg;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < count; ++j) sum += exp_nonpositive(lm[j] - mx);
        return mx + std::log(sum);
      };
      const int64_t at = item * group;
      for (int64_t g = 0; g < group; ++g) {
        lp[at + g] = left_out(mass.data() + g * m);
        if (comp) cp_out[at + g] = left_out(cmass.data() + g * m);
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
      // scores head-major ([group][token]), as decode_attention lays them out, so the softmax
      // loops run over contiguous floats and vectorize
      for (int64_t g = 0; g < group; ++g)
        widen_row(qp + (p * group + g) * dim, qf.data() + g * dim, dim);
      scores.resize(group * std::max<int64_t>(total, 1));
      int64_t t = 0;
      for (int64_t b = 0; b < std::min(kAhead, width); ++b)
        prefetch_block(kp + table[b] * k_block, lens[b], k_slot, dim);
      for (int64_t b = 0; b < width; ++b) {
        const scalar_t* kblock = kp + table[b] * k_block;
        if (b + kAhead < width)
          prefetch_block(kp + table[b + kAhead] * k_block, lens[b + kAhead], k_slot, dim);
        for (int64_t j = 0; j < lens[b]; ++j, ++t) {
          widen_row(kblock + j * k_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            scores[g * total + t] = dot(qf.data() + g * dim, row.data(), dim) * fscale;
        }
      }
      for (int64_t b = 0; b < std::min(kAhead, width); ++b)   // the value pass's first blocks
        prefetch_block(vp + table[b] * v_block, lens[b], v_slot, dim);
      for (int64_t g = 0; g < group; ++g) {
        float* sc = scores.data() + g * total;
        float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
        for (int64_t i = 0; i < total; ++i) mx = sc[i] > mx ? sc[i] : mx;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < total; ++i) {
          sc[i] = exp_nonpositive(sc[i] - mx);
          sum += sc[i];
        }
        sums[g] = sum;
        sp[p * group + g] =
            total > 0 ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      t = 0;
      for (int64_t b = 0; b < width; ++b) {
        const scalar_t* vblock = vp + table[b] * v_block;
        if (b + kAhead < width)
          prefetch_block(vp + table[b + kAhead] * v_block, lens[b + kAhead], v_slot, dim);
        for (int64_t j = 0; j < lens[b]; ++j, ++t) {
          widen_row(vblock + j * v_slot, row.data(), dim);
          for (int64_t g = 0; g < group; ++g)
            axpy(scores[g * total + t], row.data(), acc.data() + g * dim, dim);
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> select_blocks(
    const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
    const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed, int64_t picks,
    double scale, bool moment, double log_block, bool comp, double range_sigmas) {
  TORCH_CHECK(queries.device().is_cpu(), "strata_sparse::select_blocks runs on the CPU only");
  TORCH_CHECK(queries.dim() == 3 && (queries.scalar_type() == at::kFloat ||
                                     queries.scalar_type() == at::kBFloat16),
              "queries must be float32 or bfloat16 [R * KVH, G, D], pair-major");
  TORCH_CHECK(entries.dim() == 3 && entries.size(2) == (comp ? 3 : 2) * queries.size(2),
              "entries must be [KVH, NB, 2 * D] matching the queries, or [KVH, NB, 3 * D] "
              "with comp (the var row)");
  TORCH_CHECK(range_sigmas > 0, "range_sigmas must be positive");
  TORCH_CHECK(entries.size(0) > 0 && queries.size(0) % entries.size(0) == 0,
              "queries hold ", queries.size(0), " pairs, not a multiple of the entries' ",
              entries.size(0), " KV heads");
  const int64_t r = queries.size(0) / entries.size(0);
  TORCH_CHECK(mid_ids.dim() == 2 && mid_ids.size(0) == r && mid_ids.scalar_type() == at::kLong,
              "mid_ids must be int64 [R, M]");
  TORCH_CHECK(counts.dim() == 1 && counts.size(0) == r && counts.scalar_type() == at::kLong &&
              takes.sizes() == counts.sizes() && takes.scalar_type() == at::kLong,
              "counts and takes must be int64 [R]");
  TORCH_CHECK(fixed.dim() == 2 && fixed.size(0) == r && fixed.scalar_type() == at::kLong,
              "fixed must be int64 [R, F]");
  TORCH_CHECK(picks >= 0, "picks must not be negative");
  auto qc = queries.contiguous();
  auto ec = entries.contiguous();
  auto mc = mid_ids.contiguous();
  auto cc = counts.contiguous();
  auto kc = takes.contiguous();
  auto fc = fixed.contiguous();
  const int64_t* mp = mc.data_ptr<int64_t>();
  const int64_t* cp = cc.data_ptr<int64_t>();
  const int64_t* kp = kc.data_ptr<int64_t>();
  for (int64_t s = 0; s < r; ++s) {
    TORCH_CHECK(cp[s] >= 0 && cp[s] <= mc.size(1), "row ", s, " counts ", cp[s],
                " middle blocks of ", mc.size(1));
    TORCH_CHECK(kp[s] >= 0 && kp[s] <= picks, "row ", s, " takes ", kp[s], " of ", picks,
                " picks");
    for (int64_t j = 0; j < cp[s]; ++j)
      TORCH_CHECK(mp[s * mc.size(1) + j] >= 0 && mp[s * mc.size(1) + j] < ec.size(1),
                  "block id ", mp[s * mc.size(1) + j], " is outside the index's ", ec.size(1),
                  " blocks");
  }
  auto ids = at::empty({qc.size(0), fc.size(1) + picks}, mc.options());
  auto flat = at::empty_like(ids);
  auto left = at::empty({qc.size(0), qc.size(1)}, qc.options().dtype(at::kFloat));
  auto left_comp = comp ? at::empty_like(left) : at::empty({0}, left.options());
  const bool d64 = qc.size(2) == 64;
  switch (ec.scalar_type()) {
    case at::kFloat:
      d64 ? select_impl<float, 64>(qc, ec, mc, cc, kc, fc, picks, scale, moment, log_block,
                                   comp, range_sigmas, ids, flat, left, left_comp)
          : select_impl<float, 0>(qc, ec, mc, cc, kc, fc, picks, scale, moment, log_block, comp,
                                  range_sigmas, ids, flat, left, left_comp);
      break;
    case at::kBFloat16:
      d64 ? select_impl<c10::BFloat16, 64>(qc, ec, mc, cc, kc, fc, picks, scale, moment,
                                           log_block, comp, range_sigmas, ids, flat, left,
                                           left_comp)
          : select_impl<c10::BFloat16, 0>(qc, ec, mc, cc, kc, fc, picks, scale, moment,
                                          log_block, comp, range_sigmas, ids, flat, left,
                                          left_comp);
      break;
    default: TORCH_CHECK(false, "index entries must be float32 or bfloat16");
  }
  return {ids, flat, left, left_comp};
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

template <typename scalar_t>
void compensate_impl(const at::Tensor& got, const at::Tensor& lse, const at::Tensor& log_comp,
                     const at::Tensor& base, const at::Tensor& weights, const at::Tensor& vsum,
                     const at::Tensor& tables, at::Tensor& out) {
  const int64_t pairs = got.size(0), group = got.size(1), dim = got.size(2);
  const int64_t width = tables.size(1);
  const scalar_t* gp = got.data_ptr<scalar_t>();
  const float* lp = lse.data_ptr<float>();
  const float* cp = log_comp.data_ptr<float>();
  const float* bp = base.data_ptr<float>();
  const float* wp = weights.data_ptr<float>();
  const float* vp = vsum.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  const float neg = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> v(dim), row(dim);
    for (int64_t p = begin; p < end; ++p) {
      // v_left = S / n - sum over the full blocks read of vsum / n (weights hold the -1 / n)
      std::memcpy(v.data(), bp + p * dim, sizeof(float) * dim);
      for (int64_t b = 0; b < width; ++b) {
        const float w = wp[p * width + b];
        if (w != 0.f) axpy(w, vp + tp[p * width + b] * dim, v.data(), dim);
      }
      for (int64_t g = 0; g < group; ++g) {
        const int64_t at = p * group + g;
        // m = sigmoid(log E - log Z_in); nothing left out (log E = -inf) keeps the output
        const float m = cp[at] == neg ? 0.f : 1.f / (1.f + std::exp(lp[at] - cp[at]));
        widen_row(gp + at * dim, row.data(), dim);
        for (int64_t i = 0; i < dim; ++i) row[i] += m * (v[i] - row[i]);
        store_row(row.data(), op + at * dim, dim);
      }
    }
  });
}

at::Tensor compensate(const at::Tensor& got, const at::Tensor& lse, const at::Tensor& log_comp,
                      const at::Tensor& base, const at::Tensor& weights, const at::Tensor& vsum,
                      const at::Tensor& tables) {
  TORCH_CHECK(got.device().is_cpu(), "strata_sparse::compensate runs on the CPU only");
  TORCH_CHECK(got.dim() == 3, "got must be [P, G, D]");
  const int64_t pairs = got.size(0), group = got.size(1), dim = got.size(2);
  TORCH_CHECK(lse.sizes() == log_comp.sizes() && lse.dim() == 2 && lse.size(0) == pairs &&
              lse.size(1) == group && lse.scalar_type() == at::kFloat &&
              log_comp.scalar_type() == at::kFloat, "lse and log_comp must be float32 [P, G]");
  TORCH_CHECK(base.dim() == 2 && base.size(0) == pairs && base.size(1) == dim &&
              base.scalar_type() == at::kFloat, "base must be float32 [P, D]");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == pairs && tables.scalar_type() == at::kLong &&
              weights.sizes() == tables.sizes() && weights.scalar_type() == at::kFloat,
              "tables (int64) and weights (float32) must be [P, B]");
  TORCH_CHECK(vsum.dim() == 2 && vsum.size(1) == dim && vsum.scalar_type() == at::kFloat,
              "vsum must be float32 [blocks, D]");
  auto tc = tables.contiguous();
  const int64_t* tp = tc.data_ptr<int64_t>();
  for (int64_t i = 0; i < tc.numel(); ++i)
    TORCH_CHECK(tp[i] >= 0 && tp[i] < vsum.size(0), "block id ", tp[i],
                " is outside the index's ", vsum.size(0), " blocks");
  auto gc = got.contiguous();
  auto out = at::empty_like(gc);
  auto lc = lse.contiguous(), cc = log_comp.contiguous(), bc = base.contiguous();
  auto wc = weights.contiguous(), vc = vsum.contiguous();
  switch (got.scalar_type()) {
    case at::kFloat: compensate_impl<float>(gc, lc, cc, bc, wc, vc, tc, out); break;
    case at::kBFloat16: compensate_impl<c10::BFloat16>(gc, lc, cc, bc, wc, vc, tc, out); break;
    default: TORCH_CHECK(false, "strata_sparse::compensate supports float32 and bfloat16");
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_sparse, m) {
  m.def("select_blocks(Tensor queries, Tensor entries, Tensor mid_ids, Tensor counts, "
        "Tensor takes, Tensor fixed, int picks, float scale, bool moment, float log_block, "
        "bool comp, float range_sigmas) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("sparse_attention(Tensor q, Tensor k_flat, Tensor v_flat, Tensor tables, "
        "Tensor block_lens, float scale) -> (Tensor, Tensor)");
  m.def("compensate(Tensor got, Tensor lse, Tensor log_comp, Tensor base, Tensor weights, "
        "Tensor vsum, Tensor tables) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_sparse, CPU, m) {
  m.impl("select_blocks", &select_blocks);
  m.impl("sparse_attention", &sparse_attention);
  m.impl("compensate", &compensate);
}
