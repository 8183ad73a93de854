// x @ W^T for a few rows of x (a decode step) and a bfloat16 weight W [N, K] in its own
// row-major layout, for the CPU. A one-row product is a read of the whole matrix, so what
// matters is reading it at the pace of the cache or memory it sits in; rows are split over
// torch's thread pool.
//
// bfloat16 x on a CPU with AVX512_BF16: four weight rows at once against each x row with
// vdpbf16ps (exact bfloat16 products summed in float32, subnormal inputs read as zero), the rows
// two groups ahead prefetched into L1; the result is written in bfloat16 (rounded to nearest
// even) or kept as the float32 sums with float_sums (the model's logits). Otherwise (float32 x,
// or no AVX512_BF16): each weight row is widened to float32 in registers (a 16-bit shift, exact;
// sixteen weights a step with AVX-512; with AVX2, sixteen weights a load unpacked within 128-bit
// halves against x's columns stored in that order, the row kAheadBytes ahead prefetched) and
// multiplied with up to kRows rows of x widened to float32 (from kGemmRows rows on, the weight
// widened once and multiplied by sgemm); the result is rounded to x's dtype, or kept as float32
// with float_sums. Both sum in float32 in their own order, so they agree with each other and
// with F.linear to float32 rounding, not bit for bit.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

#include "cpu_math.h"

constexpr int64_t kRows = 8;  // rows of x multiplied with each weight row at once (widening)
// From this many rows of x on (a prefill chunk), the widening path widens the whole weight to
// float32 once and multiplies by ATen's matmul (sgemm) instead of walking it once per kRows rows:
// from 512 rows 1.75-2.5x faster, while up to 64 rows the walk was as fast or faster (measured:
// docs/design/engine.md).
constexpr int64_t kGemmRows = 128;
// How far ahead in the matrix the AVX2 widening walk prefetches (measured:
// docs/design/engine.md).
constexpr int64_t kAheadBytes = 8192;

#if defined(__AVX512BF16__)
constexpr int64_t kGroup = 4;  // weight rows multiplied with each x row at once (vdpbf16ps)
constexpr int64_t kAhead = 2 * kGroup;  // rows ahead of the group being read that are prefetched

// out[j] = W row j . x for the R rows from w (row stride `cols`), x one bfloat16 row; the rows
// from `ahead` are prefetched
template <int R>
inline void group_product(const c10::BFloat16* w, const c10::BFloat16* x, int64_t cols,
                          const c10::BFloat16* ahead, float* out) {
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + k);
    for (int j = 0; j < R; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + j * cols + k), _MM_HINT_T0);
      acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)_mm512_loadu_si512(w + j * cols + k), xv);
    }
  }
  if (k < cols) {  // the last columns, zeros past the end (a zero pair adds nothing)
    const __mmask32 mask = (__mmask32)((1ull << (cols - k)) - 1);
    const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + k);
    for (int j = 0; j < R; ++j)
      acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)_mm512_maskz_loadu_epi16(mask, w + j * cols + k),
                                xv);
  }
  for (int j = 0; j < R; ++j) out[j] = _mm512_reduce_add_ps(acc[j]);
}

// x (bfloat16 [m, cols], contiguous) @ W^T into out ([m, n], float32 or bfloat16)
at::Tensor linear_bf16_pairs(const at::Tensor& x, const at::Tensor& weight, bool float_sums) {
  const int64_t m = x.size(0), n = weight.size(0), cols = x.size(1);
  at::Tensor out = at::empty({m, n}, x.options().dtype(float_sums ? at::kFloat : at::kBFloat16));
  const c10::BFloat16* xp = x.data_ptr<c10::BFloat16>();
  const c10::BFloat16* wp = weight.data_ptr<c10::BFloat16>();
  float* fp = float_sums ? out.data_ptr<float>() : nullptr;
  c10::BFloat16* bp = float_sums ? nullptr : out.data_ptr<c10::BFloat16>();
  const int64_t groups = (n + kGroup - 1) / kGroup;
  at::parallel_for(0, groups, 4, [&](int64_t begin, int64_t end) {
    float res[kGroup];
    for (int64_t g = begin; g < end; ++g) {
      const int64_t r = g * kGroup, rows = std::min(kGroup, n - r);
      const c10::BFloat16* w = wp + r * cols;
      const c10::BFloat16* ahead = wp + std::min(r + kAhead, n - rows) * cols;
      for (int64_t i = 0; i < m; ++i) {
        const c10::BFloat16* xi = xp + i * cols;
        switch (rows) {
          case 4: group_product<4>(w, xi, cols, ahead, res); break;
          case 3: group_product<3>(w, xi, cols, ahead, res); break;
          case 2: group_product<2>(w, xi, cols, ahead, res); break;
          default: group_product<1>(w, xi, cols, ahead, res); break;
        }
        if (fp != nullptr)
          store_row(res, fp + i * n + r, rows);
        else
          store_row(res, bp + i * n + r, rows);
      }
    }
  });
  return out;
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// Where column j of each group of 16 is stored in the AVX2 walk's copy of x: the order in which
// a 32-byte load of 16 bfloat16 weights unpacks within its 128-bit halves (0-3 | 8-11, then
// 4-7 | 12-15). Columns past the last whole 16 stay where they are.
constexpr int64_t widen_slot(int64_t j) { return (j & 3) | ((j & 8) >> 1) | ((j & 4) << 1); }
constexpr bool kWidenOrder = true;
#else
constexpr int64_t widen_slot(int64_t j) { return j; }
constexpr bool kWidenOrder = false;
#endif

// x [m, cols] (float32 or bfloat16, any strides) as the walk reads it: float32, each group of 16
// columns in widen_slot's order (with AVX2; as it is otherwise), the columns past the last whole
// 16 where they are. Built once a call, in place of a float32 copy of x and then a reordered one.
template <typename scalar_t>
std::vector<float> walk_copy(const at::Tensor& x) {
  const int64_t m = x.size(0), cols = x.size(1);
  const auto a = x.accessor<scalar_t, 2>();
  std::vector<float> out(m * cols);
  const int64_t whole = kWidenOrder ? cols / 16 * 16 : 0;
  for (int64_t i = 0; i < m; ++i) {
    float* row = out.data() + i * cols;
    for (int64_t k = 0; k < whole; k += 16)
      for (int64_t j = 0; j < 16; ++j) row[k + widen_slot(j)] = static_cast<float>(a[i][k + j]);
    for (int64_t k = whole; k < cols; ++k) row[k] = static_cast<float>(a[i][k]);
  }
  return out;
}

// out[i] = x row i . w over `cols`, for i < MT; x as walk_copy lays it out (the tail columns in
// place). The AVX2 loop prefetches kAheadBytes on from w, within the `left` weights from w to
// the matrix's end.
template <int MT>
inline void row_product(const c10::BFloat16* w, const float* x, int64_t cols, int64_t left,
                        float* out) {
  int64_t k = 0;
#if defined(__AVX512F__)
  (void)left;
  __m512 acc_lo[MT], acc_hi[MT];
  for (int i = 0; i < MT; ++i) acc_lo[i] = acc_hi[i] = _mm512_setzero_ps();
  for (; k + 32 <= cols; k += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k + 16));
    const __m512 wa = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
    const __m512 wb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    for (int i = 0; i < MT; ++i) {
      acc_lo[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * cols + k), wa, acc_lo[i]);
      acc_hi[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * cols + k + 16), wb, acc_hi[i]);
    }
  }
  for (int i = 0; i < MT; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc_lo[i], acc_hi[i]));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc_lo[MT], acc_hi[MT];
  for (int i = 0; i < MT; ++i) acc_lo[i] = acc_hi[i] = _mm256_setzero_ps();
  const __m256i zero = _mm256_setzero_si256();
  constexpr int64_t ahead = kAheadBytes / sizeof(c10::BFloat16);
  for (; k + 16 <= cols; k += 16) {
    if (k + ahead < left) _mm_prefetch(reinterpret_cast<const char*>(w + k + ahead), _MM_HINT_T0);
    // a weight in the upper 16 bits of a zero float32 lane is that weight widened, exactly
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m256 wa = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));  // 0-3 | 8-11
    const __m256 wb = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));  // 4-7 | 12-15
    for (int i = 0; i < MT; ++i) {
      acc_lo[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * cols + k), wa, acc_lo[i]);
      acc_hi[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * cols + k + 8), wb, acc_hi[i]);
    }
  }
  for (int i = 0; i < MT; ++i) out[i] = sum8(_mm256_add_ps(acc_lo[i], acc_hi[i]));
#else
  (void)left;
  for (int i = 0; i < MT; ++i) out[i] = 0.f;
#endif
  if (k < cols) {  // the columns left over (all of them without AVX-512 or AVX2)
    std::vector<float> rest(cols - k);
    widen_row(w + k, rest.data(), cols - k);
    for (int i = 0; i < MT; ++i) out[i] += dot(x + i * cols + k, rest.data(), cols - k);
  }
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool float_sums) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, columns)");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kBFloat16,
              "weight must be contiguous bfloat16 [out, in]");
  TORCH_CHECK(x.size(1) == weight.size(1), "x has ", x.size(1), " columns, the weight ",
              weight.size(1));
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16");
#if defined(__AVX512BF16__)
  if (x.scalar_type() == at::kBFloat16) return linear_bf16_pairs(x.contiguous(), weight, float_sums);
#endif
  const int64_t m = x.size(0), n = weight.size(0), cols = x.size(1);
  if (m >= kGemmRows) {
    const at::Tensor y = at::linear(x.to(at::kFloat), weight.to(at::kFloat));
    return x.scalar_type() == at::kFloat || float_sums ? y : y.to(x.scalar_type());
  }
  // the sums go straight into the result's dtype (a bfloat16 result rounded to nearest even, as
  // .to() rounds)
  const bool to_float = x.scalar_type() == at::kFloat || float_sums;
  at::Tensor out = at::empty({m, n}, x.options().dtype(to_float ? at::kFloat : at::kBFloat16));
  const std::vector<float> xw = x.scalar_type() == at::kFloat ? walk_copy<float>(x)
                                                              : walk_copy<c10::BFloat16>(x);
  float* fp = to_float ? out.data_ptr<float>() : nullptr;
  c10::BFloat16* bp = to_float ? nullptr : out.data_ptr<c10::BFloat16>();
  const c10::BFloat16* wp = weight.data_ptr<c10::BFloat16>();
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    float res[kRows];
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i0 = 0; i0 < m; i0 += kRows) {
        const int64_t mt = std::min(kRows, m - i0);
        const float* xi = xw.data() + i0 * cols;
        const c10::BFloat16* w = wp + r * cols;
        const int64_t left = (n - r) * cols;
        switch (mt) {
          case 8: row_product<8>(w, xi, cols, left, res); break;
          case 7: row_product<7>(w, xi, cols, left, res); break;
          case 6: row_product<6>(w, xi, cols, left, res); break;
          case 5: row_product<5>(w, xi, cols, left, res); break;
          case 4: row_product<4>(w, xi, cols, left, res); break;
          case 3: row_product<3>(w, xi, cols, left, res); break;
          case 2: row_product<2>(w, xi, cols, left, res); break;
          default: row_product<1>(w, xi, cols, left, res); break;
        }
        for (int64_t i = 0; i < mt; ++i) {
          if (fp != nullptr)
            fp[(i0 + i) * n + r] = res[i];
          else
            bp[(i0 + i) * n + r] = c10::BFloat16(res[i]);
        }
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_bf16, m) {
  m.def("linear(Tensor x, Tensor weight, bool float_sums=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_bf16, CPU, m) {
  m.impl("linear", &linear);
}
