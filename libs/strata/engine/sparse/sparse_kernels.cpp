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
//   sparse_decode     the three above per pair in one call, and the trust check: a layer's
//                     sparse rows -> their output [P, G, D] and which pairs must fall back [P]
//                     (decode.py's SparseStep.attend without a probe)
//
// The helpers (widening, dot, axpy, exp of a non-positive float) are shared with strata's
// decode_attention kernel: strata/engine/kernels/cpu_math.h, with their accuracy.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
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

// One pair's selection (select_blocks): its query heads' rows against the index entries of the
// row's middle blocks, ranked and cut to the row's budget. Built once per call from the tensors,
// run per pair with a thread's own scratch; select_blocks and sparse_decode share it, so both
// give the same numbers. kD > 0 fixes head_dim at compile time (64), so the dot products'
// lengths are constants.
template <typename scalar_t, int64_t kD>
struct SelectPass {
  const float* q32;
  const c10::BFloat16* q16;
  const scalar_t* ep;
  const int64_t *mp, *cp, *kp, *fp;
  int64_t kv_heads, group, dim, nq, e, qe, nb, m, nf, picks;
  float fscale, sigmas, lb;
  bool moment, comp;

  SelectPass(const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
             const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed,
             int64_t picks_, double scale, bool moment_, double log_block, bool comp_,
             double range_sigmas)
      : q32(queries.scalar_type() == at::kBFloat16 ? nullptr : queries.data_ptr<float>()),
        q16(queries.scalar_type() == at::kBFloat16 ? queries.data_ptr<c10::BFloat16>()
                                                    : nullptr),
        ep(entries.data_ptr<scalar_t>()),
        mp(mid_ids.data_ptr<int64_t>()),
        cp(counts.data_ptr<int64_t>()),
        kp(takes.data_ptr<int64_t>()),
        fp(fixed.data_ptr<int64_t>()),
        kv_heads(entries.size(0)),
        group(queries.size(1)),
        dim(kD > 0 ? kD : queries.size(2)),
        nq(moment_ || comp_ ? 2 * queries.size(1) : queries.size(1)),
        // an entry holds e numbers, [kmax | kmin (| var)]; the query rows and the widened entry
        // are qe wide, [kmax | kmin | spread (| var)], the spread computed from the box per block
        e(entries.size(2)),
        qe(entries.size(2) + (kD > 0 ? kD : queries.size(2))),
        nb(entries.size(1)),
        m(mid_ids.size(1)),
        nf(fixed.size(1)),
        picks(picks_),
        fscale(static_cast<float>(scale)),
        sigmas(static_cast<float>(range_sigmas)),
        lb(static_cast<float>(log_block)),
        moment(moment_),
        comp(comp_) {}

  int64_t width() const { return nf + picks; }

  struct Scratch {
    std::vector<float> row, qrows, bound, mass, rank, best, cmass, terms, qs, w3rows;
    std::vector<int64_t> order;
  };
  Scratch scratch() const {
    return Scratch{std::vector<float>(qe), std::vector<float>(nq * qe),
                   std::vector<float>(group * m), std::vector<float>(group * m),
                   std::vector<float>(m), std::vector<float>(group),
                   std::vector<float>(comp ? group * m : 0), std::vector<float>(comp ? 3 * group : 0),
                   std::vector<float>(group * dim), std::vector<float>(comp ? group * dim : 0),
                   std::vector<int64_t>(m)};
  }

  // pair item = row s * kv_heads + KV head h -> the blocks it reads (out: physical ids,
  // flat_out: ids into the cache seen as KVH * NB blocks, width() each) and the log of the
  // estimated mass of the middle blocks it leaves out per query head (left; left_comp by
  // compensation's estimate when comp)
  void run(int64_t item, Scratch& sc, int64_t* out, int64_t* flat_out, float* left,
           float* left_comp) const {
    const float neg = -std::numeric_limits<float>::infinity();
    const int64_t h = item % kv_heads, s = item / kv_heads, count = cp[s], take = kp[s];
    // rows whose products with [kmax | kmin | spread (| var)] give the bound on
    // the scores, [relu(q) | min(q, 0) | 0], and the log-normal exponent, [q/2 | q/2 | q^2/2]
    // (select.py's query_rows); compensation's exponent is the second row's [q/2 | q/2]
    // against [kmax | kmin] plus its q^2/2 against var. Without comp the products are the
    // dot products select.py's matrix product takes; with comp one pass over the entry gives
    // every head's four sums (16 lanes at a time with AVX-512, comp_terms64), in another
    // order (equal to within float rounding, tested)
    if (q16 != nullptr) widen_row(q16 + item * group * dim, sc.qs.data(), group * dim);
    else widen_row(q32 + item * group * dim, sc.qs.data(), group * dim);
    for (int64_t g = 0; g < group; ++g) {
      float* b = sc.qrows.data() + g * qe;
      float* w = sc.qrows.data() + (group + g) * qe;
      for (int64_t i = 0; i < dim; ++i) {
        const float x = sc.qs[g * dim + i] * fscale;
        b[i] = x > 0.f ? x : 0.f;
        b[dim + i] = x < 0.f ? x : 0.f;
        b[2 * dim + i] = 0.f;
        if (moment || comp) {
          const float half = x * 0.5f;
          w[i] = half;
          w[dim + i] = half;
          w[2 * dim + i] = x * half;
          if (comp) sc.w3rows[g * dim + i] = x * half / (sigmas * sigmas);
        }
      }
    }
    const float* q = sc.qrows.data();
    const int64_t* sid = mp + s * m;
    float* bound = sc.bound.data();
    float* mass = sc.mass.data();
    float* cmass = sc.cmass.data();
    float* best = sc.best.data();
    float* rank = sc.rank.data();
    std::fill(sc.best.begin(), sc.best.end(), neg);
    for (int64_t j = 0; j < count; ++j) {
      if (j + 2 < count) prefetch_block(ep + (h * nb + sid[j + 2]) * e, 1, e, e);
      if (comp) {
        // one pass over the entry for every number a head needs: the bound, the center's
        // exponent (shared by both estimates), and the spread's and the var's terms
        float* t3 = sc.terms.data();
#if defined(__AVX512F__)
        if (kD == 64) {
          comp_terms64(ep + (h * nb + sid[j]) * e, q, q + group * qe, sc.w3rows.data(), qe,
                       group, t3);
        } else
#endif
        {
          const scalar_t* entry = ep + (h * nb + sid[j]) * e;
          widen_row(entry, sc.row.data(), 2 * dim);
          spread_row(sc.row.data(), dim, sigmas, sc.row.data() + 2 * dim);
          widen_row(entry + 2 * dim, sc.row.data() + 3 * dim, dim);
          comp_terms(sc.row.data(), q, q + group * qe, qe, dim, group, t3);
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
      widen_row(ep + (h * nb + sid[j]) * e, sc.row.data(), e);
      if (moment) spread_row(sc.row.data(), dim, sigmas, sc.row.data() + 2 * dim);
      for (int64_t g = 0; g < group; ++g) {
        const float* w = q + (group + g) * qe;
        // the bound row's last third is zeros: [kmax | kmin] is all it reads
        const float b = dot(q + g * qe, sc.row.data(), 2 * dim);
        bound[g * m + j] = b;
        best[g] = b > best[g] ? b : best[g];
        const float est = moment ? std::min(dot(w, sc.row.data(), 3 * dim), b) : b;
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
    std::vector<int64_t>& order = sc.order;
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
    for (int64_t f = 0; f < nf; ++f) out[f] = fp[s * nf + f];
    for (int64_t k = 0; k < picks; ++k) {
      // past the row's own budget a pick is padding (read for 0 tokens); past its middle
      // blocks it is block 0, as select.py pads
      out[nf + k] = k < top ? sid[order[k]] : 0;
    }
    // the same blocks as ids into the cache seen as KVH * NB blocks (attend.flat_ids)
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
    for (int64_t g = 0; g < group; ++g) {
      left[g] = left_out(mass + g * m);
      if (comp) left_comp[g] = left_out(cmass + g * m);
    }
  }
};

// One pair's exact attention over its own block list (sparse_attention): its G query rows over
// blocks table[0, width) of the cache seen as KVH * NB blocks, the first lens[b] tokens of each.
// kDim > 0 fixes head_dim at compile time (the common 64 and 128) so the per-key loops unroll
// into straight vector code, as in decode_attention (with AVX2 and FMA, cpu_math.h's
// attend_scores and attend_values); kDim == 0 handles any other size.
template <typename scalar_t, int64_t kDim>
struct AttendPass {
#if defined(__AVX2__) && defined(__FMA__)
  static constexpr bool kAvx2 = kDim > 0 && kDim % 64 == 0;
#else
  static constexpr bool kAvx2 = false;
#endif
  const scalar_t *kp, *vp;
  int64_t group, dim, k_block, k_slot, v_block, v_slot;
  float fscale;

  AttendPass(const at::Tensor& k_flat, const at::Tensor& v_flat, int64_t group_, int64_t dim_,
             double scale)
      : kp(k_flat.data_ptr<scalar_t>()),
        vp(v_flat.data_ptr<scalar_t>()),
        group(group_),
        dim(kDim > 0 ? kDim : dim_),
        k_block(k_flat.stride(0)),
        k_slot(k_flat.stride(1)),
        v_block(v_flat.stride(0)),
        v_slot(v_flat.stride(1)),
        fscale(static_cast<float>(scale)) {}

  struct Scratch {
    std::vector<float> qf, acc, row, scores, sums;
  };
  Scratch scratch() const {
    return Scratch{std::vector<float>(group * dim), std::vector<float>(group * dim),
                   std::vector<float>(dim), {}, std::vector<float>(group)};
  }

  // q [G, D] -> out [G, D] (rounded to out_t: scalar_t, or float for a part of a split pass)
  // and the log sum exp of the scores [G]
  template <typename out_t>
  void run(const scalar_t* q, const int64_t* table, const int64_t* lens, int64_t width,
           Scratch& sc, out_t* out, float* lse) const {
    int64_t total = 0;
    for (int64_t b = 0; b < width; ++b) total += lens[b];
    // scores head-major ([group][token]), as decode_attention lays them out, so the softmax
    // loops run over contiguous floats and vectorize
    float* qf = sc.qf.data();
    float* row = sc.row.data();
    for (int64_t g = 0; g < group; ++g) widen_row(q + g * dim, qf + g * dim, dim);
    sc.scores.resize(group * std::max<int64_t>(total, 1));
    float* scores = sc.scores.data();
    // the list's blocks from base (a block `stride` apart), each kAhead blocks on prefetched
    const auto blocks = [&](const scalar_t* base, int64_t stride, int64_t slot) {
      return [=](auto&& f) {
        for (int64_t b = 0; b < std::min(kAhead, width); ++b)
          prefetch_block(base + table[b] * stride, lens[b], slot, dim);
        for (int64_t b = 0, t0 = 0; b < width; t0 += lens[b], ++b) {
          if (b + kAhead < width)
            prefetch_block(base + table[b + kAhead] * stride, lens[b + kAhead], slot, dim);
          f(base + table[b] * stride, slot, lens[b], t0);
        }
      };
    };
    const auto keys = blocks(kp, k_block, k_slot);
    const auto values = blocks(vp, v_block, v_slot);
    if constexpr (kAvx2) {
      attend_scores<kDim>(qf, group, fscale, total, row, scores, keys);
    } else {
      keys([&](const scalar_t* kblock, int64_t slot, int64_t n, int64_t t0) {
        for (int64_t j = 0; j < n; ++j) {
          widen_row(kblock + j * slot, row, dim);
          for (int64_t g = 0; g < group; ++g)
            scores[g * total + t0 + j] = dot(qf + g * dim, row, dim) * fscale;
        }
      });
    }
    for (int64_t g = 0; g < group; ++g) {
      float* s = scores + g * total;
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t i = 0; i < total; ++i) mx = s[i] > mx ? s[i] : mx;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < total; ++i) {
        s[i] = exp_nonpositive(s[i] - mx);
        sum += s[i];
      }
      sc.sums[g] = sum;
      lse[g] = total > 0 ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
    }
    float* acc = sc.acc.data();
    if constexpr (kAvx2) {
      attend_values<kDim>(scores, sc.sums.data(), group, total, acc, values);
    } else {
      std::fill(sc.acc.begin(), sc.acc.end(), 0.f);
      values([&](const scalar_t* vblock, int64_t slot, int64_t n, int64_t t0) {
        for (int64_t j = 0; j < n; ++j) {
          widen_row(vblock + j * slot, row, dim);
          for (int64_t g = 0; g < group; ++g)
            axpy(scores[g * total + t0 + j], row, acc + g * dim, dim);
        }
      });
      for (int64_t g = 0; g < group; ++g) {
        const float inv = sc.sums[g] > 0.f ? 1.f / sc.sums[g] : 0.f;
        for (int64_t i = 0; i < dim; ++i) acc[g * dim + i] *= inv;
      }
    }
    for (int64_t g = 0; g < group; ++g) store_row(acc + g * dim, out + g * dim, dim);
  }
};

// One pair's compensation (compensate): the selection's output moved towards the left-out
// tokens' mean value by compensation's estimate of the mass left out.
struct CompensatePass {
  const float* vp;
  int64_t group, dim;

  struct Scratch {
    std::vector<float> v, row;
  };
  Scratch scratch() const { return Scratch{std::vector<float>(dim), std::vector<float>(dim)}; }

  // got [G, D], lse [G], log_comp [G], base [D] (S / n), weights and table [width] -> out [G, D]
  template <typename scalar_t>
  void run(const scalar_t* got, const float* lse, const float* log_comp, const float* base,
           const float* weights, const int64_t* table, int64_t width, Scratch& sc,
           scalar_t* out) const {
    const float neg = -std::numeric_limits<float>::infinity();
    float* v = sc.v.data();
    float* row = sc.row.data();
    // v_left = S / n - sum over the full blocks read of vsum / n (weights hold the -1 / n)
    std::memcpy(v, base, sizeof(float) * dim);
    for (int64_t b = 0; b < width; ++b) {
      const float w = weights[b];
      if (w != 0.f) axpy(w, vp + table[b] * dim, v, dim);
    }
    for (int64_t g = 0; g < group; ++g) {
      // m = sigmoid(log E - log Z_in); nothing left out (log E = -inf) keeps the output
      const float m = log_comp[g] == neg ? 0.f : 1.f / (1.f + std::exp(lse[g] - log_comp[g]));
      widen_row(got + g * dim, row, dim);
      for (int64_t i = 0; i < dim; ++i) row[i] += m * (v[i] - row[i]);
      store_row(row, out + g * dim, dim);
    }
  }
};

template <typename scalar_t, int64_t kD>
void select_impl(const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
                 const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed,
                 int64_t picks, double scale, bool moment, double log_block, bool comp,
                 double range_sigmas, at::Tensor& ids, at::Tensor& flat, at::Tensor& log_left,
                 at::Tensor& log_comp) {
  const SelectPass<scalar_t, kD> pass(queries, entries, mid_ids, counts, takes, fixed, picks,
                                      scale, moment, log_block, comp, range_sigmas);
  const int64_t w = pass.width(), group = pass.group;
  int64_t* op = ids.data_ptr<int64_t>();
  int64_t* fo = flat.data_ptr<int64_t>();
  float* lp = log_left.data_ptr<float>();
  float* cp = comp ? log_comp.data_ptr<float>() : nullptr;
  at::parallel_for(0, queries.size(0), 1, [&](int64_t begin, int64_t end) {
    auto sc = pass.scratch();
    for (int64_t item = begin; item < end; ++item)
      pass.run(item, sc, op + item * w, fo + item * w, lp + item * group,
               comp ? cp + item * group : nullptr);
  });
}

template <typename scalar_t, int64_t kDim>
void sparse_attention_impl(const at::Tensor& q, const at::Tensor& k_flat, const at::Tensor& v_flat,
                           const at::Tensor& tables, const at::Tensor& block_lens, double scale,
                           at::Tensor& out, at::Tensor& lse) {
  const AttendPass<scalar_t, kDim> pass(k_flat, v_flat, q.size(1), q.size(2), scale);
  const int64_t width = tables.size(1), rows = pass.group * pass.dim;
  const scalar_t* qp = q.data_ptr<scalar_t>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* lp = block_lens.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  float* sp = lse.data_ptr<float>();
  at::parallel_for(0, q.size(0), 1, [&](int64_t begin, int64_t end) {
    auto sc = pass.scratch();
    for (int64_t p = begin; p < end; ++p)
      pass.run(qp + p * rows, tp + p * width, lp + p * width, width, sc, op + p * rows,
               sp + p * pass.group);
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

// The selection's arguments, checked as select_blocks and sparse_decode both need them: every
// block id a pair may read lies in the index (and so in the cache, which has as many blocks).
void check_selection(const at::Tensor& queries, const at::Tensor& entries,
                     const at::Tensor& mid_ids, const at::Tensor& counts,
                     const at::Tensor& takes, const at::Tensor& fixed, int64_t picks, bool comp,
                     double range_sigmas, const char* op) {
  TORCH_CHECK(queries.device().is_cpu(), "strata_sparse::", op, " runs on the CPU only");
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
  const int64_t r = queries.size(0) / entries.size(0), nb = entries.size(1);
  TORCH_CHECK(mid_ids.dim() == 2 && mid_ids.size(0) == r && mid_ids.scalar_type() == at::kLong &&
              mid_ids.is_contiguous(), "mid_ids must be contiguous int64 [R, M]");
  TORCH_CHECK(counts.dim() == 1 && counts.size(0) == r && counts.scalar_type() == at::kLong &&
              takes.sizes() == counts.sizes() && takes.scalar_type() == at::kLong &&
              counts.is_contiguous() && takes.is_contiguous(),
              "counts and takes must be contiguous int64 [R]");
  TORCH_CHECK(fixed.dim() == 2 && fixed.size(0) == r && fixed.scalar_type() == at::kLong &&
              fixed.is_contiguous(), "fixed must be contiguous int64 [R, F]");
  TORCH_CHECK(picks >= 0, "picks must not be negative");
  const int64_t* mp = mid_ids.data_ptr<int64_t>();
  const int64_t* cp = counts.data_ptr<int64_t>();
  const int64_t* kp = takes.data_ptr<int64_t>();
  const int64_t* fp = fixed.data_ptr<int64_t>();
  for (int64_t s = 0; s < r; ++s) {
    TORCH_CHECK(cp[s] >= 0 && cp[s] <= mid_ids.size(1), "row ", s, " counts ", cp[s],
                " middle blocks of ", mid_ids.size(1));
    TORCH_CHECK(kp[s] >= 0 && kp[s] <= picks, "row ", s, " takes ", kp[s], " of ", picks,
                " picks");
    for (int64_t j = 0; j < cp[s]; ++j)
      TORCH_CHECK(mp[s * mid_ids.size(1) + j] >= 0 && mp[s * mid_ids.size(1) + j] < nb,
                  "block id ", mp[s * mid_ids.size(1) + j], " is outside the index's ", nb,
                  " blocks");
  }
  for (int64_t i = 0; i < fixed.numel(); ++i)
    TORCH_CHECK(fp[i] >= 0 && fp[i] < nb, "block id ", fp[i], " is outside the index's ", nb,
                " blocks");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> select_blocks(
    const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
    const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed, int64_t picks,
    double scale, bool moment, double log_block, bool comp, double range_sigmas) {
  auto qc = queries.contiguous();
  auto ec = entries.contiguous();
  auto mc = mid_ids.contiguous();
  auto cc = counts.contiguous();
  auto kc = takes.contiguous();
  auto fc = fixed.contiguous();
  check_selection(qc, ec, mc, cc, kc, fc, picks, comp, range_sigmas, "select_blocks");
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

// The caches seen as KVH * NB blocks of one head, [blocks, BS, D] with contiguous rows, in q's
// dtype; and per pair a row of block ids (tables, or the selection's width) with the tokens to
// read from each (block_lens, at most a block).
void check_cache(const at::Tensor& q, const at::Tensor& k_flat, const at::Tensor& v_flat,
                 const at::Tensor& block_lens, int64_t width, const char* op) {
  TORCH_CHECK(q.dim() == 3 && k_flat.dim() == 3 && v_flat.dim() == 3,
              "expected q [P,G,D] and caches [blocks, BS, D]");
  TORCH_CHECK(k_flat.sizes() == v_flat.sizes(), "k and v caches differ in shape");
  TORCH_CHECK(q.scalar_type() == k_flat.scalar_type() && q.scalar_type() == v_flat.scalar_type(),
              "q and the caches must share a dtype");
  TORCH_CHECK(q.size(2) == k_flat.size(2), "head_dim of q and the caches differ");
  TORCH_CHECK(k_flat.stride(2) == 1 && v_flat.stride(2) == 1, "cache rows must be contiguous");
  TORCH_CHECK(block_lens.dim() == 2 && block_lens.size(0) == q.size(0) &&
              block_lens.size(1) == width && block_lens.scalar_type() == at::kLong &&
              block_lens.is_contiguous(),
              "block_lens must be contiguous int64 [P, ", width, "], one row per pair (",
              op, ")");
  const int64_t* lp = block_lens.data_ptr<int64_t>();
  for (int64_t i = 0; i < block_lens.numel(); ++i)
    TORCH_CHECK(lp[i] >= 0 && lp[i] <= k_flat.size(1), "block length ", lp[i],
                " is outside [0, ", k_flat.size(1), "]");
}

std::tuple<at::Tensor, at::Tensor> sparse_attention(
    const at::Tensor& q, const at::Tensor& k_flat, const at::Tensor& v_flat,
    const at::Tensor& tables, const at::Tensor& block_lens, double scale) {
  TORCH_CHECK(q.device().is_cpu(), "strata_sparse::sparse_attention runs on the CPU only");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == q.size(0) &&
              tables.scalar_type() == at::kLong,
              "tables must be int64 [P, B], one row per pair");
  auto qc = q.contiguous();
  auto tc = tables.contiguous();
  auto lc = block_lens.contiguous();
  check_cache(qc, k_flat, v_flat, lc, tc.size(1), "sparse_attention");
  const int64_t* tp = tc.data_ptr<int64_t>();
  for (int64_t i = 0; i < tc.numel(); ++i)
    TORCH_CHECK(tp[i] >= 0 && tp[i] < k_flat.size(0), "block id ", tp[i],
                " is outside the cache's ", k_flat.size(0), " blocks");
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
  const CompensatePass pass{vsum.data_ptr<float>(), got.size(1), got.size(2)};
  const int64_t width = tables.size(1), rows = pass.group * pass.dim;
  const scalar_t* gp = got.data_ptr<scalar_t>();
  const float* lp = lse.data_ptr<float>();
  const float* cp = log_comp.data_ptr<float>();
  const float* bp = base.data_ptr<float>();
  const float* wp = weights.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  at::parallel_for(0, got.size(0), 1, [&](int64_t begin, int64_t end) {
    auto sc = pass.scratch();
    for (int64_t p = begin; p < end; ++p)
      pass.run(gp + p * rows, lp + p * pass.group, cp + p * pass.group, bp + p * pass.dim,
               wp + p * width, tp + p * width, width, sc, op + p * rows);
  });
}

// compensation's per-layer tensors: base [P, D] (S / n), weights [P, width] (float32) and
// vsum [blocks, D] (float32) covering every block id the tables may hold
void check_compensation(const at::Tensor& base, const at::Tensor& weights,
                        const at::Tensor& vsum, int64_t pairs, int64_t dim, int64_t width) {
  TORCH_CHECK(base.dim() == 2 && base.size(0) == pairs && base.size(1) == dim &&
              base.scalar_type() == at::kFloat, "base must be float32 [P, D]");
  TORCH_CHECK(weights.dim() == 2 && weights.size(0) == pairs && weights.size(1) == width &&
              weights.scalar_type() == at::kFloat, "weights must be float32 [P, ", width, "]");
  TORCH_CHECK(vsum.dim() == 2 && vsum.size(1) == dim && vsum.scalar_type() == at::kFloat,
              "vsum must be float32 [blocks, D]");
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
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == pairs && tables.scalar_type() == at::kLong,
              "tables must be int64 [P, B]");
  check_compensation(base, weights, vsum, pairs, dim, tables.size(1));
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

// Items of unequal cost over torch's threads, each thread taking the next item when it is done
// with one (a static split of 3 pairs over 2 threads leaves one thread idle half the time).
// make() builds a thread's scratch; body(scratch, item) runs one item.
template <typename Make, typename Body>
void run_dynamic(int64_t n, Make make, Body body) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), n);
  at::parallel_for(0, workers, 1, [&](int64_t begin, int64_t end) {
    auto sc = make();
    for (int64_t w = begin; w < end; ++w)
      for (int64_t item = next++; item < n; item = next++) body(sc, item);
  });
}

// Full attention of some pairs over their row's whole context (the trust check's fallback, and
// the pairs the layer policy runs dense outright), each pair's blocks cut into chunks so that
// every thread has work even when one pair of a batch-1 step is recomputed: per chunk the
// attention over its blocks and its log sum exp (run), then per pair the chunks merged by
// their log sum exps, out = sum_c exp(lse_c - lse) out_c (merge). The same sums as one pass in
// another order: equal to it within float rounding (tested against the torch path).
template <typename scalar_t, int64_t kD>
struct FullPairs {
  const AttendPass<scalar_t, kD>& att;
  std::vector<int64_t> pairs;
  std::vector<std::vector<int64_t>> flat, lens;  // per pair: flat block ids, tokens per block
  std::vector<std::tuple<int64_t, int64_t, int64_t>> chunks;  // (pair index, first block, end)
  std::vector<int64_t> first;  // each pair's first chunk
  std::vector<float> part, part_lse;

  FullPairs(const AttendPass<scalar_t, kD>& att_, std::vector<int64_t> pairs_,
            const int64_t* tables, int64_t table_width, const int64_t* context_lens,
            int64_t kv_heads, int64_t nb, int64_t block_size)
      : att(att_), pairs(std::move(pairs_)) {
    const int64_t np = static_cast<int64_t>(pairs.size());
    flat.resize(np);
    lens.resize(np);
    int64_t total = 0;
    for (int64_t i = 0; i < np; ++i) {
      const int64_t p = pairs[i], s = p / kv_heads, h = p % kv_heads, n = context_lens[s];
      const int64_t blocks = (n + block_size - 1) / block_size;
      flat[i].resize(blocks);
      lens[i].assign(blocks, block_size);
      for (int64_t b = 0; b < blocks; ++b) flat[i][b] = tables[s * table_width + b] + h * nb;
      if (blocks > 0) lens[i][blocks - 1] = n - (blocks - 1) * block_size;
      total += blocks;
    }
    const int64_t threads = at::get_num_threads();
    const int64_t chunk = std::max<int64_t>(8, (total + 8 * threads - 1) / (8 * threads));
    first.resize(np + 1);
    for (int64_t i = 0; i < np; ++i) {
      first[i] = static_cast<int64_t>(chunks.size());
      const int64_t blocks = static_cast<int64_t>(flat[i].size());
      for (int64_t b = 0; b < blocks; b += chunk)
        chunks.emplace_back(i, b, std::min(blocks, b + chunk));
    }
    first[np] = static_cast<int64_t>(chunks.size());
    part.resize(chunks.size() * att.group * att.dim);
    part_lse.resize(chunks.size() * att.group);
  }

  int64_t size() const { return static_cast<int64_t>(chunks.size()); }

  void run(int64_t c, const scalar_t* qp, typename AttendPass<scalar_t, kD>::Scratch& as) {
    const int64_t rows = att.group * att.dim;
    const auto [i, b0, b1] = chunks[c];
    att.run(qp + pairs[i] * rows, flat[i].data() + b0, lens[i].data() + b0, b1 - b0, as,
            part.data() + c * rows, part_lse.data() + c * att.group);
  }

  // every pair's chunks merged into its output rows (op: the layer's [P, G, D])
  void merge(scalar_t* op) const {
    const int64_t group = att.group, dim = att.dim, rows = group * dim;
    std::vector<float> acc(rows);
    for (size_t i = 0; i < pairs.size(); ++i) {
      merge_chunks(part.data(), part_lse.data(), first[i], first[i + 1], group, dim, acc.data());
      for (int64_t g = 0; g < group; ++g)
        store_row(acc.data() + g * dim, op + pairs[i] * rows + g * dim, dim);
    }
  }
};

// sparse_decode: the three passes per pair in one call, with the trust check and its fallback,
// so a layer's sparse rows cost one dispatch instead of three and a dozen small tensor
// operations between them. Each pair's selection, attention and compensation run back to back
// on one thread through the same SelectPass, AttendPass and CompensatePass as the three ops, so
// a pair that passes the check gets their output bit for bit (tested). fail[p]: the trust
// check's estimate of the mass left out passes the threshold for one of the pair's query
// heads, log E - log Z_in > logit_threshold; such a pair's output is full attention over its
// row's context (tables [R, W] physical ids, context_lens [R]), as is that of a pair with
// dense[p] set, which skips the selection (fail[p] false).
template <typename scalar_t, int64_t kD>
void decode_impl(const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
                 const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed,
                 int64_t picks, double scale, bool moment, double log_block, bool comp,
                 double range_sigmas, const at::Tensor& k_flat, const at::Tensor& v_flat,
                 const at::Tensor& block_lens, const at::Tensor& base, const at::Tensor& weights,
                 const at::Tensor& vsum, double logit_threshold, const at::Tensor& dense,
                 const at::Tensor& tables, const at::Tensor& context_lens, at::Tensor& out,
                 at::Tensor& fail) {
  const SelectPass<scalar_t, kD> sel(queries, entries, mid_ids, counts, takes, fixed, picks,
                                     scale, moment, log_block, comp, range_sigmas);
  const AttendPass<scalar_t, kD> att(k_flat, v_flat, sel.group, sel.dim, scale);
  const CompensatePass cmp{comp ? vsum.data_ptr<float>() : nullptr, sel.group, sel.dim};
  const int64_t w = sel.width(), group = sel.group, rows = group * sel.dim;
  const scalar_t* qp = queries.data_ptr<scalar_t>();
  const int64_t* lp = block_lens.data_ptr<int64_t>();
  const float* bp = comp ? base.data_ptr<float>() : nullptr;
  const float* wp = comp ? weights.data_ptr<float>() : nullptr;
  scalar_t* op = out.data_ptr<scalar_t>();
  bool* fp = fail.data_ptr<bool>();
  const bool* dp = dense.data_ptr<bool>();
  const float threshold = static_cast<float>(logit_threshold);
  // the pairs the policy runs dense, in chunks, share the threads with the sparse pairs'
  // selections; then the pairs that failed the check, in chunks
  const int64_t pairs = queries.size(0);
  std::vector<int64_t> todo, dense_pairs;
  for (int64_t p = 0; p < pairs; ++p) {
    fp[p] = false;
    (dp[p] ? dense_pairs : todo).push_back(p);
  }
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* np = context_lens.data_ptr<int64_t>();
  const int64_t bs = k_flat.size(1);
  FullPairs<scalar_t, kD> dense_full(att, dense_pairs, tp, tables.size(1), np, sel.kv_heads,
                                     sel.nb, bs);
  const int64_t n_sparse = static_cast<int64_t>(todo.size());
  struct Scratch {
    typename SelectPass<scalar_t, kD>::Scratch ss;
    typename AttendPass<scalar_t, kD>::Scratch as;
    CompensatePass::Scratch cs;
    std::vector<int64_t> ids, flat;
    std::vector<float> left, left_comp, lse;
    std::vector<scalar_t> got;
  };
  const auto make = [&] {
    return Scratch{sel.scratch(), att.scratch(), cmp.scratch(), std::vector<int64_t>(w),
                   std::vector<int64_t>(w), std::vector<float>(group),
                   std::vector<float>(group), std::vector<float>(group),
                   std::vector<scalar_t>(comp ? rows : 0)};
  };
  run_dynamic(n_sparse + dense_full.size(), make, [&](Scratch& sc, int64_t item) {
    if (item >= n_sparse) {
      dense_full.run(item - n_sparse, qp, sc.as);
      return;
    }
    const int64_t p = todo[item];
    sel.run(p, sc.ss, sc.ids.data(), sc.flat.data(), sc.left.data(), sc.left_comp.data());
    scalar_t* o = op + p * rows;
    // without compensation the selection's output is the layer's; with it, rounded to
    // scalar_t first as the three ops hand it on
    att.run(qp + p * rows, sc.flat.data(), lp + p * w, w, sc.as, comp ? sc.got.data() : o,
            sc.lse.data());
    if (comp)
      cmp.run(sc.got.data(), sc.lse.data(), sc.left_comp.data(), bp + p * sel.dim, wp + p * w,
              sc.flat.data(), w, sc.cs, o);
    bool f = false;
    for (int64_t g = 0; g < group; ++g) f = f || (sc.left[g] - sc.lse[g]) > threshold;
    fp[p] = f;
  });
  dense_full.merge(op);
  std::vector<int64_t> failed;
  for (int64_t p : todo)
    if (fp[p]) failed.push_back(p);
  if (failed.empty()) return;
  FullPairs<scalar_t, kD> redo(att, failed, tp, tables.size(1), np, sel.kv_heads, sel.nb, bs);
  run_dynamic(redo.size(), [&] { return att.scratch(); },
              [&](typename AttendPass<scalar_t, kD>::Scratch& as, int64_t c) {
                redo.run(c, qp, as);
              });
  redo.merge(op);
}

// The fallback's arguments: dense [P] bool; tables [R, W] int64, every id a row's context
// covers inside the index; context_lens [R] int64, each within its row's table.
void check_full(const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& dense,
                const at::Tensor& tables, const at::Tensor& context_lens, int64_t block_size) {
  const int64_t r = queries.size(0) / entries.size(0), nb = entries.size(1);
  TORCH_CHECK(dense.dim() == 1 && dense.size(0) == queries.size(0) &&
              dense.scalar_type() == at::kBool, "dense must be bool [P], one per pair");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == r && tables.scalar_type() == at::kLong,
              "tables must be int64 [R, W], one row per sequence");
  TORCH_CHECK(context_lens.dim() == 1 && context_lens.size(0) == r &&
              context_lens.scalar_type() == at::kLong, "context_lens must be int64 [R]");
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* np = context_lens.data_ptr<int64_t>();
  for (int64_t s = 0; s < r; ++s) {
    const int64_t blocks = (np[s] + block_size - 1) / block_size;
    TORCH_CHECK(np[s] > 0 && blocks <= tables.size(1), "row ", s, "'s context of ", np[s],
                " tokens does not fit its table of ", tables.size(1), " blocks of ",
                block_size);
    for (int64_t b = 0; b < blocks; ++b)
      TORCH_CHECK(tp[s * tables.size(1) + b] >= 0 && tp[s * tables.size(1) + b] < nb,
                  "block id ", tp[s * tables.size(1) + b], " is outside the index's ", nb,
                  " blocks");
  }
}

std::tuple<at::Tensor, at::Tensor> sparse_decode(
    const at::Tensor& queries, const at::Tensor& entries, const at::Tensor& mid_ids,
    const at::Tensor& counts, const at::Tensor& takes, const at::Tensor& fixed, int64_t picks,
    double scale, bool moment, double log_block, bool comp, double range_sigmas,
    const at::Tensor& k_flat, const at::Tensor& v_flat, const at::Tensor& block_lens,
    const at::Tensor& base, const at::Tensor& weights, const at::Tensor& vsum,
    double logit_threshold, const at::Tensor& dense, const at::Tensor& tables,
    const at::Tensor& context_lens) {
  auto qc = queries.contiguous();
  auto ec = entries.contiguous();
  auto mc = mid_ids.contiguous();
  auto cc = counts.contiguous();
  auto kc = takes.contiguous();
  auto fc = fixed.contiguous();
  auto lc = block_lens.contiguous();
  check_selection(qc, ec, mc, cc, kc, fc, picks, comp, range_sigmas, "sparse_decode");
  const int64_t width = fc.size(1) + picks;
  check_cache(qc, k_flat, v_flat, lc, width, "sparse_decode");
  TORCH_CHECK(ec.scalar_type() == qc.scalar_type(),
              "the index entries and the queries must share a dtype");
  TORCH_CHECK(k_flat.size(0) == ec.size(0) * ec.size(1), "the caches hold ", k_flat.size(0),
              " blocks, not the index's ", ec.size(0), " KV heads x ", ec.size(1));
  at::Tensor bc, wc, vc;
  if (comp) {
    bc = base.contiguous();
    wc = weights.contiguous();
    vc = vsum.contiguous();
    check_compensation(bc, wc, vc, qc.size(0), qc.size(2), width);
    TORCH_CHECK(vc.size(0) == k_flat.size(0), "vsum holds ", vc.size(0), " blocks, not the ",
                "cache's ", k_flat.size(0));
  }
  auto dc = dense.contiguous();
  auto tc = tables.contiguous();
  auto nc = context_lens.contiguous();
  check_full(qc, ec, dc, tc, nc, k_flat.size(1));
  auto out = at::empty_like(qc);
  auto fail = at::empty({qc.size(0)}, qc.options().dtype(at::kBool));
#define STRATA_DECODE(T, D)                                                                  \
  decode_impl<T, D>(qc, ec, mc, cc, kc, fc, picks, scale, moment, log_block, comp,            \
                    range_sigmas, k_flat, v_flat, lc, bc, wc, vc, logit_threshold, dc, tc, nc, \
                    out, fail)
  switch (qc.scalar_type()) {
    case at::kFloat:
      qc.size(2) == 64 ? STRATA_DECODE(float, 64) : STRATA_DECODE(float, 0);
      break;
    case at::kBFloat16:
      qc.size(2) == 64 ? STRATA_DECODE(c10::BFloat16, 64) : STRATA_DECODE(c10::BFloat16, 0);
      break;
    default: TORCH_CHECK(false, "strata_sparse::sparse_decode supports float32 and bfloat16");
  }
#undef STRATA_DECODE
  return {out, fail};
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
  m.def("sparse_decode(Tensor queries, Tensor entries, Tensor mid_ids, Tensor counts, "
        "Tensor takes, Tensor fixed, int picks, float scale, bool moment, float log_block, "
        "bool comp, float range_sigmas, Tensor k_flat, Tensor v_flat, Tensor block_lens, "
        "Tensor base, Tensor weights, Tensor vsum, float logit_threshold, Tensor dense, "
        "Tensor tables, Tensor context_lens) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(strata_sparse, CPU, m) {
  m.impl("select_blocks", &select_blocks);
  m.impl("sparse_attention", &sparse_attention);
  m.impl("compensate", &compensate);
  m.impl("sparse_decode", &sparse_decode);
}
