// Fused paged decode attention for the CPU: one new query token per sequence attends over its
// blocks of the KV cache, read in place through the block table (no gather copy, no padded mask,
// no dtype round trips). Work is split over (sequence, kv head) with at::parallel_for so it runs
// on torch's own thread pool; spawning threads or linking a second OpenMP runtime here would make
// the two pools spin against each other. A step of fewer than kMinParallelKeys key rows runs on
// the calling thread. When the items are too few to keep every thread busy (a batch-1 step),
// long contexts are cut into chunks merged by their log sum exps.
//
// Inner loops run over head_dim in float: with AVX-512 BF16 and a bfloat16 cache, vdpbf16ps
// (run_vector); with AVX2 and FMA and head_dim a multiple of 64, eight-float vectors over a
// head_dim fixed at compile time (run_avx2); otherwise OpenMP simd loops, which GCC vectorizes
// without -ffast-math (run). bfloat16 is widened by a 16-bit shift, which is exact.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

#include "cpu_math.h"

#if defined(__AVX512BF16__)
// The AVX-512 BF16 path for bfloat16 caches (head_dim a multiple of 32, blocks a multiple of 16
// keys): scores are bf16 pair dot products (vdpbf16ps: the products are exact in float32, sums
// rounded to nearest even with denormals flushed) of 16 keys at a time, reduced together; the
// weighted sum of values keeps up to 4 query heads x 64 dims of accumulators in registers.

// lane j of the result = the sum of v[j]'s 16 lanes: a transposing tree of 15 adds instead of 16
// separate horizontal reductions
inline __m512 reduce16(__m512* v) {
  __m512 s1[8], s2[4], s3[2];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3]
    s1[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                          _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: one partial of each of 4 keys, in order
    const __m512d a = _mm512_castps_pd(s1[2 * i]), b = _mm512_castps_pd(s1[2 * i + 1]);
    s2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                          _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i)
    s3[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2 * i], s2[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(s2[2 * i], s2[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// scores[t] = scale * q . k_t for n (<= 16) keys at k_slot apart; q and keys kDim bf16 each
template <int64_t kDim>
inline void scores16(const c10::BFloat16* q, const c10::BFloat16* keys, int64_t k_slot, int64_t n,
                     float scale, float* scores) {
  constexpr int kPairs = kDim / 32;  // 32 bf16 (16 pairs) a vector
  __m512bh qv[kPairs];
  for (int c = 0; c < kPairs; ++c) qv[c] = (__m512bh)_mm512_loadu_si512(q + 32 * c);
  __m512 acc[16];
  for (int64_t j = 0; j < 16; ++j) {
    acc[j] = _mm512_setzero_ps();
    if (j < n)
      for (int c = 0; c < kPairs; ++c)
        acc[j] = _mm512_dpbf16_ps(
            acc[j], qv[c], (__m512bh)_mm512_loadu_si512(keys + j * k_slot + 32 * c));
  }
  const __m512 out = _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale));
  _mm512_mask_storeu_ps(scores, static_cast<__mmask16>((1u << n) - 1u), out);
}

inline __m512 widen16(const c10::BFloat16* x) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
#endif

// Below this many (sequence, kv head) items per thread, a long context is cut into chunks so
// that every thread has work: a batch-1 step of a model with 3 kv heads on 2 threads would
// otherwise run two items on one thread while the other waits for it.
constexpr int64_t kItemsPerThread = 4;
constexpr int64_t kMinChunkTokens = 512;
// Under this many key rows in all (context tokens times kv heads, summed over the sequences), the
// whole step runs on the calling thread: waking the pool costs more than it saves (measured:
// docs/design/engine.md).
constexpr int64_t kMinParallelKeys = 2048;

// kDim > 0 fixes head_dim at compile time (the common 64 and 128), so the per-key loops unroll
// into straight vector code; kDim == 0 handles any other size.
template <typename scalar_t, int64_t kDim>
struct DecodePass {
  const scalar_t *qp, *kp, *vp;
  const int64_t *tables, *lens;
  int64_t heads, dim, kv_heads, block_size, width, group, k_head, k_block, k_slot, v_head,
      v_block, v_slot;
  float fscale;

  struct Scratch {
    std::vector<float> qf, acc, row, scores, sums;
  };
  Scratch scratch() const {
    return Scratch{std::vector<float>(group * dim), std::vector<float>(group * dim),
                   std::vector<float>(dim), {}, std::vector<float>(group)};
  }

  // (sequence s, kv head kh) over tokens [t_begin, t_end) of its context, t_begin at a block
  // boundary -> out [G, D] (its attention over those tokens, rounded to out_t) and, with lse,
  // the log sum exp of their scores per query head
#if defined(__AVX512BF16__)
  static constexpr bool kVector =
      std::is_same<scalar_t, c10::BFloat16>::value && kDim > 0 && kDim % 64 == 0;
#else
  static constexpr bool kVector = false;
#endif
  // Otherwise, with AVX2 and FMA and head_dim a multiple of 64: run_avx2
#if defined(__AVX2__) && defined(__FMA__)
  static constexpr bool kAvx2 = !kVector && kDim > 0 && kDim % 64 == 0;
#else
  static constexpr bool kAvx2 = false;
#endif

  // each query head's scores [G][n_tok] -> their softmax numerators in place, each head's sum
  // in sc.sums (the normalisation is applied once to the output rows) and, with lse, its log
  // sum exp
  void softmax_numerators(float* scores, int64_t n_tok, Scratch& sc, float* lse) const {
    for (int64_t g = 0; g < group; ++g) {
      float* sg = scores + g * n_tok;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < n_tok; ++t) mx = sg[t] > mx ? sg[t] : mx;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < n_tok; ++t) {
        sg[t] = exp_nonpositive(sg[t] - mx);
        sum += sg[t];
      }
      sc.sums[g] = sum;
      if (lse != nullptr) lse[g] = mx + std::log(sum);
    }
  }

  template <typename out_t>
  void run(int64_t s, int64_t kh, int64_t t_begin, int64_t t_end, Scratch& sc, out_t* out,
           float* lse) const {
    if constexpr (kVector) {
      if (block_size % 16 == 0) {
        run_vector(s, kh, t_begin, t_end, sc, out, lse);
        return;
      }
    }
    if constexpr (kAvx2) {
      run_avx2(s, kh, t_begin, t_end, sc, out, lse);
      return;
    }
    const int64_t n_tok = t_end - t_begin;
    const int64_t* table = tables + s * width;
    float* qf = sc.qf.data();
    float* row = sc.row.data();
    for (int64_t g = 0; g < group; ++g)
      widen_row(qp + (s * heads + kh * group + g) * dim, qf + g * dim, dim);
    sc.scores.resize(group * n_tok);
    float* scores = sc.scores.data();

    // pass 1: scaled scores, one key row widened once and shared by the G query heads
    const scalar_t* kbase = kp + kh * k_head;
    for (int64_t t0 = t_begin; t0 < t_end; t0 += block_size) {
      const scalar_t* kblock = kbase + table[t0 / block_size] * k_block;
      const int64_t n = std::min(block_size, t_end - t0);
      for (int64_t j = 0; j < n; ++j) {
        widen_row(kblock + j * k_slot, row, dim);
        for (int64_t g = 0; g < group; ++g)
          scores[g * n_tok + t0 - t_begin + j] = dot(qf + g * dim, row, dim) * fscale;
      }
    }
    softmax_numerators(scores, n_tok, sc, lse);
    // pass 2: weighted sum of values
    float* acc = sc.acc.data();
    std::fill(sc.acc.begin(), sc.acc.end(), 0.f);
    const scalar_t* vbase = vp + kh * v_head;
    for (int64_t t0 = t_begin; t0 < t_end; t0 += block_size) {
      const scalar_t* vblock = vbase + table[t0 / block_size] * v_block;
      const int64_t n = std::min(block_size, t_end - t0);
      for (int64_t j = 0; j < n; ++j) {
        widen_row(vblock + j * v_slot, row, dim);
        for (int64_t g = 0; g < group; ++g)
          axpy(scores[g * n_tok + t0 - t_begin + j], row, acc + g * dim, dim);
      }
    }
    for (int64_t g = 0; g < group; ++g) {
      float* a = acc + g * dim;
      const float inv = sc.sums[g] > 0.f ? 1.f / sc.sums[g] : 0.f;
      for (int64_t i = 0; i < dim; ++i) a[i] *= inv;
      store_row(a, out + g * dim, dim);
    }
  }

#if defined(__AVX2__) && defined(__FMA__)
  // run() with AVX2 over head_dim fixed at compile time (kAvx2: cpu_math.h's attend_scores and
  // attend_values): the same softmax and output rounding, the sums in another order
  template <typename out_t>
  void run_avx2(int64_t s, int64_t kh, int64_t t_begin, int64_t t_end, Scratch& sc, out_t* out,
                float* lse) const {
    const int64_t n_tok = t_end - t_begin;
    const int64_t* table = tables + s * width;
    float* qf = sc.qf.data();
    for (int64_t g = 0; g < group; ++g)
      widen_row(qp + (s * heads + kh * group + g) * kDim, qf + g * kDim, kDim);
    sc.scores.resize(group * n_tok);
    float* scores = sc.scores.data();
    // the blocks of [t_begin, t_end) from base, a block `stride` apart in the cache
    const auto blocks = [&](const scalar_t* base, int64_t stride, int64_t slot) {
      return [=](auto&& f) {
        for (int64_t t0 = t_begin; t0 < t_end; t0 += block_size)
          f(base + table[t0 / block_size] * stride, slot, std::min(block_size, t_end - t0),
            t0 - t_begin);
      };
    };
    attend_scores<kDim>(qf, group, fscale, n_tok, sc.row.data(), scores,
                        blocks(kp + kh * k_head, k_block, k_slot));
    softmax_numerators(scores, n_tok, sc, lse);
    attend_values<kDim>(scores, sc.sums.data(), group, n_tok, sc.acc.data(),
                        blocks(vp + kh * v_head, v_block, v_slot));
    for (int64_t g = 0; g < group; ++g) store_row(sc.acc.data() + g * kDim, out + g * kDim, kDim);
  }
#endif

#if defined(__AVX512BF16__)
  // run() on the AVX-512 BF16 path (kVector; blocks a multiple of 16 keys): the same softmax
  // and the same output rounding, the dot products and sums in another order
  template <typename out_t>
  void run_vector(int64_t s, int64_t kh, int64_t t_begin, int64_t t_end, Scratch& sc,
                  out_t* out, float* lse) const {
    const int64_t n_tok = t_end - t_begin;
    const int64_t* table = tables + s * width;
    sc.scores.resize(group * n_tok);
    float* scores = sc.scores.data();
    const scalar_t* kbase = kp + kh * k_head;
    for (int64_t g = 0; g < group; ++g) {
      const scalar_t* qg = qp + (s * heads + kh * group + g) * kDim;
      for (int64_t t0 = t_begin; t0 < t_end; t0 += block_size) {
        const scalar_t* kblock = kbase + table[t0 / block_size] * k_block;
        const int64_t n = std::min(block_size, t_end - t0);
        for (int64_t j = 0; j < n; j += 16)
          scores16<kDim>(qg, kblock + j * k_slot, k_slot, std::min<int64_t>(16, n - j), fscale,
                         scores + g * n_tok + t0 - t_begin + j);
      }
    }
    softmax_numerators(scores, n_tok, sc, lse);
    // values: 4 query heads x 64 dims of accumulators held in registers over every token
    float* acc = sc.acc.data();
    const scalar_t* vbase = vp + kh * v_head;
    for (int64_t g0 = 0; g0 < group; g0 += 4) {
      const int64_t gn = std::min<int64_t>(4, group - g0);
      for (int64_t d0 = 0; d0 < kDim; d0 += 64) {
        __m512 a[4][4];
        for (int g = 0; g < 4; ++g)
          for (int c = 0; c < 4; ++c) a[g][c] = _mm512_setzero_ps();
        for (int64_t t0 = t_begin; t0 < t_end; t0 += block_size) {
          const scalar_t* vblock = vbase + table[t0 / block_size] * v_block + d0;
          const int64_t n = std::min(block_size, t_end - t0);
          const float* p = scores + g0 * n_tok + t0 - t_begin;
          for (int64_t j = 0; j < n; ++j) {
            const scalar_t* row = vblock + j * v_slot;
            const __m512 v0 = widen16(row), v1 = widen16(row + 16), v2 = widen16(row + 32),
                         v3 = widen16(row + 48);
            for (int g = 0; g < 4; ++g) {
              if (g >= gn) break;
              const __m512 w = _mm512_set1_ps(p[g * n_tok + j]);
              a[g][0] = _mm512_fmadd_ps(w, v0, a[g][0]);
              a[g][1] = _mm512_fmadd_ps(w, v1, a[g][1]);
              a[g][2] = _mm512_fmadd_ps(w, v2, a[g][2]);
              a[g][3] = _mm512_fmadd_ps(w, v3, a[g][3]);
            }
          }
        }
        for (int64_t g = 0; g < gn; ++g) {
          const float inv = sc.sums[g0 + g] > 0.f ? 1.f / sc.sums[g0 + g] : 0.f;
          const __m512 iv = _mm512_set1_ps(inv);
          for (int c = 0; c < 4; ++c)
            _mm512_storeu_ps(acc + (g0 + g) * kDim + d0 + 16 * c, _mm512_mul_ps(a[g][c], iv));
        }
      }
    }
    for (int64_t g = 0; g < group; ++g) store_row(acc + g * kDim, out + g * kDim, kDim);
  }
#endif
};

template <typename scalar_t, int64_t kDim>
void decode_attention_impl(const at::Tensor& q, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& block_tables,
                           const at::Tensor& context_lens, double scale, at::Tensor& out) {
  const int64_t seqs = q.size(0), heads = q.size(1), kv_heads = k_cache.size(0);
  // caches may be views into the pool tensor: honour their strides (the row itself is contiguous)
  const DecodePass<scalar_t, kDim> pass{
      q.data_ptr<scalar_t>(), k_cache.data_ptr<scalar_t>(), v_cache.data_ptr<scalar_t>(),
      block_tables.data_ptr<int64_t>(), context_lens.data_ptr<int64_t>(), heads,
      kDim > 0 ? kDim : q.size(2), kv_heads, k_cache.size(2), block_tables.size(1),
      heads / kv_heads, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
      v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), static_cast<float>(scale)};
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t rows = pass.group * pass.dim;
  scalar_t* op = out.data_ptr<scalar_t>();
  const int64_t threads = at::get_num_threads();
  const int64_t pairs = seqs * kv_heads;
  int64_t total = 0;
  for (int64_t s = 0; s < seqs; ++s) total += lens[s] * kv_heads;
  // pairs [begin, end) whole: each output straight from one pass
  const auto whole = [&](int64_t begin, int64_t end) {
    auto sc = pass.scratch();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / kv_heads, kh = item % kv_heads;
      pass.run(s, kh, 0, lens[s], sc, op + (s * heads + kh * pass.group) * pass.dim,
               static_cast<float*>(nullptr));
    }
  };
  if (total < kMinParallelKeys) {
    whole(0, pairs);
    return;
  }
  // tokens a chunk covers, whole blocks: every item whole when the pairs fill the threads
  int64_t chunk = std::numeric_limits<int64_t>::max();
  if (threads > 1 && pairs < kItemsPerThread * threads) {
    const int64_t want = (total + kItemsPerThread * threads - 1) / (kItemsPerThread * threads);
    chunk = std::max(kMinChunkTokens, want);
    chunk = (chunk + pass.block_size - 1) / pass.block_size * pass.block_size;
  }
  std::vector<int64_t> first(pairs + 1, 0);  // each pair's first chunk
  for (int64_t item = 0; item < pairs; ++item) {
    const int64_t ctx = lens[item / kv_heads];
    first[item + 1] = first[item] + (chunk >= ctx ? 1 : (ctx + chunk - 1) / chunk);
  }
  if (first[pairs] == pairs) {  // one chunk a pair
    at::parallel_for(0, pairs, 1, whole);
    return;
  }
  // chunks of long contexts: each chunk's attention and log sum exp, then per pair the chunks
  // merged by their log sum exps (merge_chunks: the same sums as one pass, in another order)
  const int64_t chunks = first[pairs];
  std::vector<int64_t> owner(chunks);
  for (int64_t item = 0; item < pairs; ++item)
    for (int64_t c = first[item]; c < first[item + 1]; ++c) owner[c] = item;
  std::vector<float> part(chunks * rows), part_lse(chunks * pass.group);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    auto sc = pass.scratch();
    for (int64_t c = begin; c < end; ++c) {
      const int64_t item = owner[c], s = item / kv_heads, kh = item % kv_heads;
      // a pair of one chunk starts at 0, so t0 + chunk cannot overflow
      const int64_t t0 = (c - first[item]) * chunk;
      const int64_t t1 = std::min(lens[s], t0 + chunk);
      pass.run(s, kh, t0, t1, sc, part.data() + c * rows, part_lse.data() + c * pass.group);
    }
  });
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(rows);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / kv_heads, kh = item % kv_heads;
      merge_chunks(part.data(), part_lse.data(), first[item], first[item + 1], pass.group,
                   pass.dim, acc.data());
      for (int64_t g = 0; g < pass.group; ++g)
        store_row(acc.data() + g * pass.dim,
                  op + (s * heads + kh * pass.group + g) * pass.dim, pass.dim);
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
