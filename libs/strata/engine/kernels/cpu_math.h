// Shared helpers of strata's CPU kernels (decode_attention.cpp, sparse/sparse_kernels.cpp):
// widening bfloat16 rows to float, storing them back, dot and axpy over head_dim, exp of a
// non-positive float, and (with AVX2 and FMA) attention's two passes over a head_dim fixed at
// compile time. Inner loops run over head_dim in float; reductions are OpenMP simd reductions so
// GCC vectorizes them without -ffast-math. bfloat16 is widened by a 16-bit shift, which is exact.
// Included inside each kernel's anonymous namespace, after <algorithm>, <cmath>, <cstring>,
// <limits>, <type_traits> and (with AVX2) <immintrin.h>.

#pragma once

inline void widen_row(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, sizeof(float) * n);
}

inline void widen_row(const c10::BFloat16* src, float* dst, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(bits[i]) << 16;
}

inline void store_row(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, sizeof(float) * n);
}

inline void store_row(const float* src, c10::BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = c10::BFloat16(src[i]);  // round to nearest even
}

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float total = 0.f;
  // an OpenMP simd reduction lets GCC keep vector partial sums and reduce them once, as a tree
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += a[i] * b[i];
  return total;
}

inline void axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// exp(x) for x <= 0 (scores minus their maximum), written so the loop calling it vectorizes:
// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor polynomial of
// e^r (truncation below 2.5e-7 relative) and 2^n built in the exponent bits. Measured maximum
// relative error against double-precision exp over [-87, 0] in steps of 1e-5: 2.3e-7. Below -87
// it returns 0. The loop vectorizes only with -fno-trapping-math (kernels/__init__.py): without it
// GCC keeps the clamp and the final select as branches.
inline float exp_nonpositive(float in) {
  const float x = in < -87.f ? -87.f : in;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return in < -87.f ? 0.f : p * scale;
}

// Attention over chunks of one pair's keys merged into its attention over all of them: part
// [chunk][group * dim] (each chunk's normalised output) and part_lse [chunk][group] (the log
// sum exp of its scores) for chunks [first, last) -> acc [group * dim] = sum_c exp(lse_c - lse)
// part_c, lse the log sum exp over all the chunks. A query head without a token keeps acc at zero,
// as one pass over no token leaves it.
inline void merge_chunks(const float* part, const float* part_lse, int64_t first, int64_t last,
                         int64_t group, int64_t dim, float* acc) {
  const float neg = -std::numeric_limits<float>::infinity();
  std::fill(acc, acc + group * dim, 0.f);
  for (int64_t g = 0; g < group; ++g) {
    float mx = neg;
    for (int64_t c = first; c < last; ++c) mx = std::max(mx, part_lse[c * group + g]);
    if (mx == neg) continue;
    float sum = 0.f;
    for (int64_t c = first; c < last; ++c) sum += std::exp(part_lse[c * group + g] - mx);
    for (int64_t c = first; c < last; ++c)
      axpy(std::exp(part_lse[c * group + g] - mx) / sum, part + c * group * dim + g * dim,
           acc + g * dim, dim);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// Eight floats of a row, widened from bfloat16 by the same exact shift as widen_row.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

inline float sum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// Attention's passes over tokens that a walk hands over block by block: walk(f) calls
// f(rows, slot, n, t) for each block, rows its first token's row (float or bfloat16, kDim
// values, `slot` apart) and t that token's index among the n_tok tokens; the tokens of all
// blocks are 0..n_tok-1 once each. kDim is a multiple of 64.
//
// Pass 1: scores[g * n_tok + t] = scale * q_g . key_t for the G query heads qf [G][kDim]: a key
// row read in place (bfloat16 widened once into buf [kDim] for every head), two FMA chains a
// dot product.
template <int64_t kDim, typename Walk>
inline void attend_scores(const float* qf, int64_t group, float scale, int64_t n_tok, float* buf,
                          float* scores, Walk&& walk) {
  static_assert(kDim % 64 == 0, "head_dim a multiple of 64");
  walk([&](const auto* rows, int64_t slot, int64_t n, int64_t t) {
    using row_t = std::remove_cv_t<std::remove_pointer_t<decltype(rows)>>;
    for (int64_t j = 0; j < n; ++j) {
      const float* key;
      if constexpr (std::is_same<row_t, float>::value) {
        key = rows + j * slot;
      } else {
        for (int64_t c = 0; c < kDim; c += 8) _mm256_storeu_ps(buf + c, load8(rows + j * slot + c));
        key = buf;
      }
      for (int64_t g = 0; g < group; ++g) {
        const float* qg = qf + g * kDim;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int64_t c = 0; c < kDim; c += 16) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_loadu_ps(key + c), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c + 8), _mm256_loadu_ps(key + c + 8), a1);
        }
        scores[g * n_tok + t + j] = sum8(_mm256_add_ps(a0, a1)) * scale;
      }
    }
  });
}

// Pass 2: acc [G][kDim] = (sum_t p[g * n_tok + t] value_t) / sums[g] (zero where sums[g] is
// not positive), the values walked once per query head and 64 dims, those 64 dims' sums held in
// eight registers over every token.
template <int64_t kDim, typename Walk>
inline void attend_values(const float* p, const float* sums, int64_t group, int64_t n_tok,
                          float* acc, Walk&& walk) {
  static_assert(kDim % 64 == 0, "head_dim a multiple of 64");
  for (int64_t g = 0; g < group; ++g) {
    const float* pg = p + g * n_tok;
    const __m256 inv = _mm256_set1_ps(sums[g] > 0.f ? 1.f / sums[g] : 0.f);
    for (int64_t d0 = 0; d0 < kDim; d0 += 64) {
      __m256 a[8];
      for (int c = 0; c < 8; ++c) a[c] = _mm256_setzero_ps();
      walk([&](const auto* rows, int64_t slot, int64_t n, int64_t t) {
        for (int64_t j = 0; j < n; ++j) {
          const __m256 w = _mm256_set1_ps(pg[t + j]);
          const auto* row = rows + j * slot + d0;
          for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(w, load8(row + 8 * c), a[c]);
        }
      });
      for (int c = 0; c < 8; ++c)
        _mm256_storeu_ps(acc + g * kDim + d0 + 8 * c, _mm256_mul_ps(a[c], inv));
    }
  }
}
#endif
