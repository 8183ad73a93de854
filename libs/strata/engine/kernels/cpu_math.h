// Shared helpers of strata's CPU kernels (decode_attention.cpp, sparse/sparse_kernels.cpp):
// widening bfloat16 rows to float, storing them back, dot and axpy over head_dim, and exp of a
// non-positive float. Inner loops run over head_dim in float; reductions are OpenMP simd
// reductions so GCC vectorizes them without -ffast-math. bfloat16 is widened by a 16-bit shift,
// which is exact. Included inside each kernel's anonymous namespace, after <algorithm>, <cmath>,
// <cstring> and <limits>.

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
