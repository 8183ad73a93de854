// Linear layers over quantized weights for the CPU (formats: strata/engine/quant/formats.py).
//
// linear(x, packed, scales, offsets, bits) = x @ W^T with W decoded on the fly:
// - few rows of x (a decode step; M under kGemmRowsFloat or kGemmRowsBFloat16): each block of kTile weight rows is decoded in
//   registers and multiplied with up to kTile rows of x at once, accumulating in float32; the
//   weights are read from memory at 4-5 bits a weight instead of 32;
// - many rows (a prefill chunk): the matrix is decoded once into x's dtype and multiplied by
//   ATen's matmul, which is what the engine did with the weights widened at load, bit for bit.
// dequantize(...) decodes a whole matrix (or gathered rows of one) into a float dtype.
// Work is split with at::parallel_for, on torch's own thread pool (see kernels/__init__.py).

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

#include "cpu_math.h"

constexpr int64_t kBlock = 32;    // weights per scale
constexpr int64_t kTile = 4;      // weight rows a task of the thread pool takes together
constexpr int64_t kRows = 8;      // rows of x multiplied with each decoded block
// From this many rows of x on, the matrix is decoded once and multiplied by ATen's matmul: for
// bfloat16 x that is oneDNN's bfloat16 dot-product path, twice the float32 FMA rate, so it pays
// from fewer rows (measured in docs/benchmarks/engine.md).
constexpr int64_t kGemmRowsFloat = 48;
constexpr int64_t kGemmRowsBFloat16 = 16;

// Decode one row of `cols` weights into float. The product q * scale is exact in float32, so
// one rounding (the add) gives the same value as gguf's reference decoder.
inline void decode_row(int64_t bits, const void* packed, const float* scales,
                       const float* offsets, int64_t cols, float* dst) {
  const int64_t blocks = cols / kBlock;
  if (bits == 4) {
    const uint8_t* q = static_cast<const uint8_t*>(packed);
    for (int64_t b = 0; b < blocks; ++b) {
      const float s = scales[b], o = offsets[b];
      const uint8_t* qb = q + b * (kBlock / 2);
      float* out = dst + b * kBlock;
#pragma omp simd
      for (int j = 0; j < kBlock / 2; ++j) {
        out[j] = static_cast<float>(qb[j] & 0x0F) * s + o;
        out[j + kBlock / 2] = static_cast<float>(qb[j] >> 4) * s + o;
      }
    }
  } else {
    const int8_t* q = static_cast<const int8_t*>(packed);
    for (int64_t b = 0; b < blocks; ++b) {
      const float s = scales[b];
      const int8_t* qb = q + b * kBlock;
      float* out = dst + b * kBlock;
#pragma omp simd
      for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(qb[j]) * s;
    }
  }
}

#if defined(__AVX512F__)
// The 32 weights of block `b` of one row, decoded into two vectors (weights 0-15 and 16-31).
inline void decode_block(int64_t bits, const uint8_t* row, const float* scales,
                         const float* offsets, int64_t b, __m512& lo, __m512& hi) {
  const __m512 s = _mm512_set1_ps(scales[b]);
  if (bits == 4) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * (kBlock / 2)));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m512 o = _mm512_set1_ps(offsets[b]);
    const __m512 qlo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    const __m512 qhi =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
    lo = _mm512_fmadd_ps(qlo, s, o);
    hi = _mm512_fmadd_ps(qhi, s, o);
  } else {
    const uint8_t* qb = row + b * kBlock;
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), s);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), s);
  }
}

// out[i * kTile + j] = x row i . W row (n0 + j) for i < MT, j < valid: each weight row is
// walked once, block by block (so each thread reads one stream of packed bytes and one of scales
// at a time), each block decoded in registers and multiplied with the MT rows of x, which stay in
// L1. Two accumulators a row of x keep the FMA chains short.
template <int MT>
void tile_product(int64_t bits, const uint8_t* packed, int64_t row_bytes, const float* scales,
                  const float* offsets, int64_t per_row, int64_t n0, int64_t valid,
                  const float* x, int64_t cols, float* out) {
  for (int64_t j = 0; j < valid; ++j) {
    const int64_t r = n0 + j;
    const uint8_t* row = packed + r * row_bytes;
    const float* s = scales + r * per_row;
    const float* o = offsets ? offsets + r * per_row : nullptr;
    __m512 acc_lo[MT], acc_hi[MT];
    for (int i = 0; i < MT; ++i) acc_lo[i] = acc_hi[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < per_row; ++b) {
      __m512 lo, hi;
      decode_block(bits, row, s, o, b, lo, hi);
      for (int i = 0; i < MT; ++i) {
        acc_lo[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * cols + b * kBlock), lo, acc_lo[i]);
        acc_hi[i] =
            _mm512_fmadd_ps(_mm512_loadu_ps(x + i * cols + b * kBlock + 16), hi, acc_hi[i]);
      }
    }
    for (int i = 0; i < MT; ++i)
      out[i * kTile + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc_lo[i], acc_hi[i]));
  }
}
#else
// Portable version: decode the tile's rows into `w` (kTile rows of `cols` floats), then dot.
template <int MT>
void tile_product(int64_t bits, const uint8_t* packed, int64_t row_bytes, const float* scales,
                  const float* offsets, int64_t per_row, int64_t n0, int64_t valid,
                  const float* x, int64_t cols, float* out) {
  thread_local std::vector<float> w;
  w.resize(kTile * cols);
  for (int64_t j = 0; j < valid; ++j) {
    const int64_t r = n0 + j;
    decode_row(bits, packed + r * row_bytes, scales + r * per_row,
               offsets ? offsets + r * per_row : nullptr, cols, w.data() + j * cols);
  }
  for (int i = 0; i < MT; ++i)
    for (int64_t j = 0; j < valid; ++j)
      out[i * kTile + j] = dot(x + i * cols, w.data() + j * cols, cols);
}
#endif

void check_weight(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& offsets,
                  int64_t bits, int64_t cols) {
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8, got ", bits);
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous(), "packed must be contiguous 2-D");
  TORCH_CHECK(packed.scalar_type() == (bits == 4 ? at::kByte : at::kChar),
              "packed must be uint8 for 4 bits and int8 for 8");
  TORCH_CHECK(cols % kBlock == 0, "columns must be a multiple of ", kBlock, ", got ", cols);
  TORCH_CHECK(packed.size(1) == (bits == 4 ? cols / 2 : cols), "packed has ", packed.size(1),
              " bytes a row, ", cols, " columns need ", bits == 4 ? cols / 2 : cols);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() &&
                  scales.dim() == 2 && scales.size(0) == packed.size(0) &&
                  scales.size(1) == cols / kBlock,
              "scales must be contiguous float32 (rows, cols / 32)");
  if (bits == 4)
    TORCH_CHECK(offsets.scalar_type() == at::kFloat && offsets.is_contiguous() &&
                    offsets.sizes() == scales.sizes(),
                "offsets must be contiguous float32 shaped like scales");
}

at::Tensor dequantize(const at::Tensor& packed, const at::Tensor& scales,
                      const at::Tensor& offsets, int64_t bits, at::ScalarType dtype) {
  const int64_t rows = packed.size(0);
  const int64_t cols = bits == 4 ? packed.size(1) * 2 : packed.size(1);
  check_weight(packed, scales, offsets, bits, cols);
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "dtype must be float32 or bfloat16");
  at::Tensor out = at::empty({rows, cols}, packed.options().dtype(dtype));
  const uint8_t* pp = static_cast<const uint8_t*>(packed.data_ptr());
  const int64_t row_bytes = packed.size(1);
  const float* sp = scales.data_ptr<float>();
  const float* op = bits == 4 ? offsets.data_ptr<float>() : nullptr;
  const int64_t per_row = cols / kBlock;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(dtype == at::kFloat ? 0 : cols);
    for (int64_t r = begin; r < end; ++r) {
      float* dst = dtype == at::kFloat ? out.data_ptr<float>() + r * cols : row.data();
      decode_row(bits, pp + r * row_bytes, sp + r * per_row, op ? op + r * per_row : nullptr,
                 cols, dst);
      if (dtype == at::kBFloat16)
        store_row(row.data(), out.data_ptr<c10::BFloat16>() + r * cols, cols);
    }
  });
  return out;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                  const at::Tensor& offsets, int64_t bits) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, columns)");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16");
  const int64_t m = x.size(0), cols = x.size(1), n = packed.size(0);
  check_weight(packed, scales, offsets, bits, cols);
  if (m >= (x.scalar_type() == at::kFloat ? kGemmRowsFloat : kGemmRowsBFloat16))
    return at::linear(x, dequantize(packed, scales, offsets, bits, x.scalar_type()));

  const at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat));
  const float* xp = xf.data_ptr<float>();
  float* yp = out.data_ptr<float>();
  const uint8_t* pp = static_cast<const uint8_t*>(packed.data_ptr());
  const int64_t row_bytes = packed.size(1);
  const float* sp = scales.data_ptr<float>();
  const float* op = bits == 4 ? offsets.data_ptr<float>() : nullptr;
  const int64_t per_row = cols / kBlock;
  const int64_t tiles = (n + kTile - 1) / kTile;

  at::parallel_for(0, tiles, 4, [&](int64_t begin, int64_t end) {
    float res[kRows * kTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kTile, valid = std::min(kTile, n - n0);
      for (int64_t i0 = 0; i0 < m; i0 += kRows) {
        const int64_t mt = std::min(kRows, m - i0);
        const float* xi = xp + i0 * cols;
        switch (mt) {
          case 8: tile_product<8>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 7: tile_product<7>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 6: tile_product<6>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 5: tile_product<5>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 4: tile_product<4>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 3: tile_product<3>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          case 2: tile_product<2>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
          default: tile_product<1>(bits, pp, row_bytes, sp, op, per_row, n0, valid, xi, cols, res); break;
        }
        for (int64_t i = 0; i < mt; ++i)
          for (int64_t j = 0; j < valid; ++j) yp[(i0 + i) * n + n0 + j] = res[i * kTile + j];
      }
    }
  });
  return x.scalar_type() == at::kFloat ? out : out.to(x.scalar_type());
}

}  // namespace

TORCH_LIBRARY(strata_quant, m) {
  m.def("linear(Tensor x, Tensor packed, Tensor scales, Tensor offsets, int bits) -> Tensor");
  m.def("dequantize(Tensor packed, Tensor scales, Tensor offsets, int bits, ScalarType dtype) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(strata_quant, CPU, m) {
  m.impl("linear", &linear);
  m.impl("dequantize", &dequantize);
}
