// x @ W^T for a few rows of float32 x (a decode step) and a float32 weight W [N, K] in its own
// row-major layout, for the CPU. A one-row product is a read of the whole matrix, so what
// matters is reading it at the pace of the memory it sits in; rows of W are split over torch's
// thread pool in groups of four, each group's rows multiplied with every x row at once
// (sixteen columns a step with AVX-512, eight with AVX2), the rows two groups ahead prefetched
// into L1. The sums are float32 in their own order, so the result agrees with F.linear's to
// float32 rounding, not bit for bit.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace {

#include "cpu_math.h"

constexpr int64_t kGroup = 4;           // weight rows multiplied with each x row at once
constexpr int64_t kAhead = 2 * kGroup;  // rows ahead of the group being read that are prefetched

// out[j] = W row j . x for the R rows from w (row stride `cols`); the rows from `ahead` are
// prefetched
template <int R>
inline void group_product(const float* w, const float* x, int64_t cols, const float* ahead,
                          float* out) {
  int64_t k = 0;
#if defined(__AVX512F__)
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (; k + 16 <= cols; k += 16) {
    const __m512 xv = _mm512_loadu_ps(x + k);
    for (int j = 0; j < R; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + j * cols + k), _MM_HINT_T0);
      acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(w + j * cols + k), xv, acc[j]);
    }
  }
  if (k < cols) {  // the last columns, zeros past the end
    const __mmask16 mask = static_cast<__mmask16>((1u << (cols - k)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(mask, x + k);
    for (int j = 0; j < R; ++j)
      acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, w + j * cols + k), xv, acc[j]);
    k = cols;
  }
  for (int j = 0; j < R; ++j) out[j] = _mm512_reduce_add_ps(acc[j]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (; k + 8 <= cols; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    for (int j = 0; j < R; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + j * cols + k), _MM_HINT_T0);
      acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w + j * cols + k), xv, acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) out[j] = sum8(acc[j]);
#else
  (void)ahead;
  for (int j = 0; j < R; ++j) out[j] = 0.f;
#endif
  for (int j = 0; j < R; ++j)  // the columns left over (all of them without AVX-512 or AVX2)
    out[j] += dot(x + k, w + j * cols + k, cols - k);
}

at::Tensor linear(const at::Tensor& x_in, const at::Tensor& weight) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat,
              "x must be float32 2-D (rows, columns)");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous() && weight.scalar_type() == at::kFloat,
              "weight must be contiguous float32 [out, in]");
  TORCH_CHECK(x_in.size(1) == weight.size(1), "x has ", x_in.size(1), " columns, the weight ",
              weight.size(1));
  const at::Tensor x = x_in.contiguous();
  const int64_t m = x.size(0), n = weight.size(0), cols = x.size(1);
  at::Tensor out = at::empty({m, n}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t groups = (n + kGroup - 1) / kGroup;
  at::parallel_for(0, groups, 4, [&](int64_t begin, int64_t end) {
    float res[kGroup];
    for (int64_t g = begin; g < end; ++g) {
      const int64_t r = g * kGroup, rows = std::min(kGroup, n - r);
      const float* w = wp + r * cols;
      const float* ahead = wp + std::min(r + kAhead, n - rows) * cols;
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = xp + i * cols;
        switch (rows) {
          case 4: group_product<4>(w, xi, cols, ahead, res); break;
          case 3: group_product<3>(w, xi, cols, ahead, res); break;
          case 2: group_product<2>(w, xi, cols, ahead, res); break;
          default: group_product<1>(w, xi, cols, ahead, res); break;
        }
        std::copy(res, res + rows, op + i * n + r);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_f32, m) {
  m.def("linear(Tensor x, Tensor weight) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_f32, CPU, m) {
  m.impl("linear", &linear);
}
