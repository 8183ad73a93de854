// Linear layers over quantized weights for the CPU (the layout: strata/engine/quant/formats.py;
// each row is its blocks one after another, a block's scale and offset beside its weights).
//
// linear(x, data, bits) = x @ W^T with W decoded on the fly:
// - few-row products (a decode step; M under kGemmRowsFloat or kGemmRowsBFloat16): each
//   weight row is walked once, block by block, decoded in registers and multiplied with up to
//   kRows rows of x, accumulating in float32 (with float_sums the float32 sums are returned
//   unrounded: the model's logits);
// - many rows (a prefill chunk): the matrix is decoded once into x's dtype and multiplied by
//   ATen's matmul, which is what the engine did with the weights widened at load, bit for bit
//   (its result is in x's dtype, float_sums or not).
// Either way the weights are read at 6 (4-bit) or 9 (8-bit) bits a weight instead of 32: a
// decode step is bound by that read. dequantize(data, bits, dtype) decodes a whole matrix.
// Work is split over weight rows with at::parallel_for, on torch's own thread pool
// (kernels/__init__.py), so each thread reads one contiguous span of the matrix. The few-row
// product has an AVX-512 version (which prefetches the rows ahead: the matrix streams from L3 or
// memory), an AVX2-with-FMA version (eight weights a vector; for one or two rows of x, x
// rounded to 16-bit integers per block of 32, each value within half a step of 1/32767 of its
// block's largest |x|, the block's products summed exactly in integers, and four weight rows
// walked together with the matrix prefetched kAheadBytes ahead) and a portable one (decode a row
// into a buffer, then dot); the CPU's flags choose at compile time.

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

constexpr int64_t kBlock = 32;  // weights per block
constexpr int64_t kTile = 4;    // weight rows a task of the thread pool takes together
constexpr int64_t kRows = 8;    // rows of x multiplied with each decoded block
constexpr int64_t kAhead = 8;     // weight rows ahead of the one being read that are prefetched
// From this many rows of x on, the matrix is decoded once and multiplied by ATen's matmul: for
// bfloat16 x that is oneDNN's bfloat16 dot-product path, twice the float32 FMA rate, so it pays
// from fewer rows, though not from as few as a lone matrix suggests (measured in the whole model:
// docs/design/engine.md).
constexpr int64_t kGemmRowsFloat = 48;
constexpr int64_t kGemmRowsBFloat16 = 32;
// Up to this many rows of x, the AVX2 build multiplies x rounded to 16-bit integers
// (tile_product_int16); from three rows on, the float path's decoded block serves every row and
// is the faster (measured: docs/design/engine.md).
constexpr int64_t kInt16Rows = 2;
// How far ahead of the weight rows being multiplied the 16-bit product prefetches the matrix.
// Walking four rows at once, the hardware prefetcher alone leaves it waiting on memory
// (measured: docs/design/engine.md).
constexpr int64_t kAheadBytes = 8192;
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define STRATA_INT16_ROWS 1
#else
#define STRATA_INT16_ROWS 0
#endif

inline int64_t block_bytes(int64_t bits) { return bits == 4 ? 24 : 36; }

inline float read_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Decode one row of `cols` weights into float. The product q * scale is exact in float32, so
// one rounding (the add) gives the same value as gguf's reference decoder.
inline void decode_row(int64_t bits, const uint8_t* row, int64_t cols, float* dst) {
  const int64_t blocks = cols / kBlock, bb = block_bytes(bits);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * bb;
    const float s = read_f32(blk);
    float* out = dst + b * kBlock;
    if (bits == 4) {
      const float o = read_f32(blk + 4);
      const uint8_t* q = blk + 8;
#pragma omp simd
      for (int j = 0; j < kBlock / 2; ++j) {
        out[j] = static_cast<float>(q[j] & 0x0F) * s + o;
        out[j + kBlock / 2] = static_cast<float>(q[j] >> 4) * s + o;
      }
    } else {
      const int8_t* q = reinterpret_cast<const int8_t*>(blk + 4);
#pragma omp simd
      for (int j = 0; j < kBlock; ++j) out[j] = static_cast<float>(q[j]) * s;
    }
  }
}

#if defined(__AVX512F__)
// One block's 32 weights, decoded into two vectors (weights 0-15 and 16-31).
inline void decode_block(int64_t bits, const uint8_t* blk, __m512& lo, __m512& hi) {
  const __m512 s = _mm512_set1_ps(read_f32(blk));
  if (bits == 4) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m512 o = _mm512_set1_ps(read_f32(blk + 4));
    const __m512 qlo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    const __m512 qhi =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
    lo = _mm512_fmadd_ps(qlo, s, o);
    hi = _mm512_fmadd_ps(qhi, s, o);
  } else {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 20));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), s);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), s);
  }
}

// out[i * kTile + j] = x row i . W row (n0 + j) for i < MT, j < valid: each weight row is
// walked once, block by block, each block decoded in registers and multiplied with the MT rows
// of x, which stay in L1; the row kAhead rows on (at most last_row) is prefetched into L1
// beside it.
template <int MT>
void tile_product(int64_t bits, const uint8_t* data, int64_t row_bytes, int64_t n0,
                  int64_t valid, int64_t last_row, const float* x, int64_t cols, float* out) {
  const int64_t blocks = cols / kBlock, bb = block_bytes(bits);
  for (int64_t j = 0; j < valid; ++j) {
    const uint8_t* row = data + (n0 + j) * row_bytes;
    const uint8_t* ahead = data + std::min(n0 + j + kAhead, last_row) * row_bytes;
    __m512 acc_lo[MT], acc_hi[MT];
    for (int i = 0; i < MT; ++i) acc_lo[i] = acc_hi[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + b * bb), _MM_HINT_T0);
      __m512 lo, hi;
      decode_block(bits, row + b * bb, lo, hi);
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
#elif defined(__AVX2__) && defined(__FMA__)
// One block's 32 weights, decoded into four vectors of eight (weights 0-7, ..., 24-31), each
// weight q * scale + offset with one rounding, as decode_row computes it.
inline void decode_block(int64_t bits, const uint8_t* blk, __m256 w[4]) {
  const __m256 s = _mm256_set1_ps(read_f32(blk));
  if (bits == 4) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask);                      // weights 0-15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);   // weights 16-31
    const __m256 o = _mm256_set1_ps(read_f32(blk + 4));
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; ++k)
      w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k])), s, o);
  } else {
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 4 + 8 * k));
      w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s);
    }
  }
}

// As the AVX-512 version, eight weights a vector. Each row of x keeps kAcc accumulators, the
// block's four vectors going to them in turn, so that few rows (a decode step) are not bound by
// the latency of one chain of FMAs; more rows have their own chains and fewer registers each.
template <int MT>
void tile_product(int64_t bits, const uint8_t* data, int64_t row_bytes, int64_t n0,
                  int64_t valid, int64_t last_row, const float* x, int64_t cols, float* out) {
  constexpr int kAcc = MT == 1 ? 4 : (MT <= 3 ? 2 : 1);
  const int64_t blocks = cols / kBlock, bb = block_bytes(bits);
  for (int64_t j = 0; j < valid; ++j) {
    const uint8_t* row = data + (n0 + j) * row_bytes;
    __m256 acc[MT][kAcc];
    for (int i = 0; i < MT; ++i)
      for (int a = 0; a < kAcc; ++a) acc[i][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      __m256 w[4];
      decode_block(bits, row + b * bb, w);
      for (int i = 0; i < MT; ++i) {
        const float* xb = x + i * cols + b * kBlock;
        for (int k = 0; k < 4; ++k)
          acc[i][k % kAcc] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8 * k), w[k], acc[i][k % kAcc]);
      }
    }
    for (int i = 0; i < MT; ++i) {
      __m256 sum = acc[i][0];
      for (int a = 1; a < kAcc; ++a) sum = _mm256_add_ps(sum, acc[i][a]);
      out[i * kTile + j] = sum8(sum);
    }
  }
}

// The one- and two-row product (a decode step of one or two sequences): x is rounded to
// 16-bit integers per block of 32 values (q = round(x / scale), scale = the block's largest
// |x| / 32767, so each value is off by at most scale / 2) and a block's 32 products are summed
// exactly in int32 (vpmaddwd), then scaled once in float by the weight's and x's scales; a
// 4-bit block's offset adds offset * the block's exact float32 sum of x. Against the float
// path it does a third of the work a block, which is what bounds a step on this CPU.
struct XInt16 {
  std::vector<int16_t> q;
  std::vector<float> scale, sum;  // per (row, block)
};

// XInt16's arrays as the product reads them (unaliased, so they stay in registers).
struct XView {
  const int16_t* __restrict q;
  const float* __restrict scale;
  const float* __restrict sum;
};

// Where x's value k of a block is stored: in the order block_int16 unpacks weights in (its two
// vectors' 128-bit halves hold weights 0-7 | 16-23 and 8-15 | 24-31), so that no unpacking
// crosses halves.
constexpr int int16_slot(int k) { return (k & 7) | ((k & 16) >> 1) | ((k & 8) << 1); }

void round_x(const float* x, int64_t m, int64_t cols, XInt16& out) {
  const int64_t blocks = m * cols / kBlock;
  out.q.resize(m * cols);
  out.scale.resize(blocks);
  out.sum.resize(blocks);
  for (int64_t i = 0; i < blocks; ++i) {
    const float* xb = x + i * kBlock;
    float amax = 0.f, sum = 0.f;
    for (int k = 0; k < kBlock; ++k) {
      amax = std::max(amax, std::fabs(xb[k]));
      sum += xb[k];
    }
    // a block holding an inf (amax) or a NaN (the sum; std::max passes over it) gets q = 0 and
    // a NaN scale, so its products are NaN where the float path's are non-finite
    const bool finite = std::isfinite(amax) && !std::isnan(sum);
    const float inv = finite && amax > 0.f ? 32767.f / amax : 0.f;
    for (int k = 0; k < kBlock; ++k)
      out.q[i * kBlock + int16_slot(k)] =
          finite ? static_cast<int16_t>(std::nearbyint(xb[k] * inv)) : 0;
    out.scale[i] = finite ? amax / 32767.f : std::numeric_limits<float>::quiet_NaN();
    out.sum[i] = sum;
  }
}

// One block's 32 weights as 16-bit integers (without scale or offset), in int16_slot's order:
// w0 holds weights 0-7 | 16-23, w1 weights 8-15 | 24-31.
inline void block_int16(int64_t bits, const uint8_t* blk, __m256i& w0, __m256i& w1) {
  if (bits == 4) {
    // the block's 16 bytes in both halves, the upper half's shifted down a nibble: after the
    // mask, bytes hold weights 0-15 | 16-31
    const __m256i q =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8)));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                         _mm256_set1_epi8(0x0F));
    w0 = _mm256_unpacklo_epi8(nibbles, _mm256_setzero_si256());
    w1 = _mm256_unpackhi_epi8(nibbles, _mm256_setzero_si256());
  } else {
    // bytes 0-15 | 16-31; each byte doubled into a 16-bit lane, then shifted down with its sign
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 4));
    w0 = _mm256_srai_epi16(_mm256_unpacklo_epi8(q, q), 8);
    w1 = _mm256_srai_epi16(_mm256_unpackhi_epi8(q, q), 8);
  }
}

// out[i * kTile + j0 + r] = x row i . W row (n0 + j0 + r) for i < MT, r < R: the R weight rows
// are walked together, block by block, each load of x serving all of them, with one chain of
// FMAs a (row, x row) and the 4-bit offsets of all R rows in one vector; the matrix kAheadBytes
// on (within the matrix's `size` bytes) is prefetched as it goes.
template <int MT, int R>
void rows_int16(int64_t bits, const uint8_t* data, int64_t row_bytes, int64_t n0, int64_t j0,
                const XView& x, int64_t cols, int64_t size, float* out) {
  static_assert(R <= 4, "the offsets of at most four rows share one vector");
  const int64_t blocks = cols / kBlock, bb = block_bytes(bits);
  const bool offset = bits == 4;
  const uint8_t* row0 = data + (n0 + j0) * row_bytes;
  int64_t ahead = (n0 + j0) * row_bytes + kAheadBytes;  // an offset into the matrix
  const int64_t ahead_step = (R * row_bytes + blocks - 1) / blocks;  // two lines a block cover it
  __m256 acc[R][MT];
  __m128 off[MT];  // lane r: row r's offsets times x's block sums
  for (int i = 0; i < MT; ++i) {
    off[i] = _mm_setzero_ps();
    for (int r = 0; r < R; ++r) acc[r][i] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b, ahead += ahead_step) {
    if (ahead + 64 < size) {
      _mm_prefetch(reinterpret_cast<const char*>(data + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(data + ahead + 64), _MM_HINT_T0);
    }
    __m256i x0[MT], x1[MT];
    float xs[MT];
    for (int i = 0; i < MT; ++i) {
      const int16_t* xb = x.q + i * cols + b * kBlock;
      x0[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      x1[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 16));
      xs[i] = x.scale[i * blocks + b];
    }
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = row0 + r * row_bytes + b * bb;
      __m256i w0, w1;
      block_int16(bits, blk, w0, w1);
      const float s = read_f32(blk);
      if (offset) o[r] = read_f32(blk + 4);
      for (int i = 0; i < MT; ++i) {
        const __m256i p =
            _mm256_add_epi32(_mm256_madd_epi16(w0, x0[i]), _mm256_madd_epi16(w1, x1[i]));
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(s * xs[i]), acc[r][i]);
      }
    }
    if (offset) {
      // built from registers: a store of o and a vector load back would stall on forwarding
      const __m128 ov = _mm_setr_ps(o[0], o[1], o[2], o[3]);
      for (int i = 0; i < MT; ++i)
        off[i] = _mm_fmadd_ps(ov, _mm_set1_ps(x.sum[i * blocks + b]), off[i]);
    }
  }
  for (int i = 0; i < MT; ++i) {
    float offs[4];
    _mm_storeu_ps(offs, off[i]);
    for (int r = 0; r < R; ++r) out[i * kTile + j0 + r] = sum8(acc[r][i]) + offs[r];
  }
}

// out[i * kTile + j] = x row i . W row (n0 + j) for i < MT, j < valid, four rows at a time.
template <int MT>
void tile_product_int16(int64_t bits, const uint8_t* data, int64_t row_bytes, int64_t n0,
                        int64_t valid, int64_t rows, const XInt16& xq, int64_t cols, float* out) {
  const XView x{xq.q.data(), xq.scale.data(), xq.sum.data()};
  const int64_t size = rows * row_bytes;
  int64_t j = 0;
  for (; j + 4 <= valid; j += 4)
    rows_int16<MT, 4>(bits, data, row_bytes, n0, j, x, cols, size, out);
  for (; j + 2 <= valid; j += 2)
    rows_int16<MT, 2>(bits, data, row_bytes, n0, j, x, cols, size, out);
  for (; j < valid; ++j)
    rows_int16<MT, 1>(bits, data, row_bytes, n0, j, x, cols, size, out);
}
#else
// Portable version: decode each weight row into a buffer, then dot.
template <int MT>
void tile_product(int64_t bits, const uint8_t* data, int64_t row_bytes, int64_t n0,
                  int64_t valid, int64_t last_row, const float* x, int64_t cols, float* out) {
  thread_local std::vector<float> w;
  w.resize(cols);
  for (int64_t j = 0; j < valid; ++j) {
    decode_row(bits, data + (n0 + j) * row_bytes, cols, w.data());
    for (int i = 0; i < MT; ++i) out[i * kTile + j] = dot(x + i * cols, w.data(), cols);
  }
}
#endif

// The matrix's columns, after checking its data against `bits`.
int64_t check_weight(const at::Tensor& data, int64_t bits) {
  TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8, got ", bits);
  TORCH_CHECK(data.dim() == 2 && data.is_contiguous() && data.scalar_type() == at::kByte,
              "data must be contiguous 2-D uint8");
  const int64_t bb = block_bytes(bits);
  TORCH_CHECK(data.size(1) % bb == 0, "a row of ", data.size(1), " bytes is not whole ", bb,
              "-byte blocks of ", bits, "-bit weights");
  return data.size(1) / bb * kBlock;
}

at::Tensor dequantize(const at::Tensor& data, int64_t bits, at::ScalarType dtype) {
  const int64_t cols = check_weight(data, bits), rows = data.size(0);
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "dtype must be float32 or bfloat16");
  at::Tensor out = at::empty({rows, cols}, data.options().dtype(dtype));
  const uint8_t* dp = data.data_ptr<uint8_t>();
  const int64_t row_bytes = data.size(1);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(dtype == at::kFloat ? 0 : cols);
    for (int64_t r = begin; r < end; ++r) {
      float* dst = dtype == at::kFloat ? out.data_ptr<float>() + r * cols : row.data();
      decode_row(bits, dp + r * row_bytes, cols, dst);
      if (dtype == at::kBFloat16)
        store_row(row.data(), out.data_ptr<c10::BFloat16>() + r * cols, cols);
    }
  });
  return out;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& data, int64_t bits, bool float_sums) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, columns)");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16");
  const int64_t cols = check_weight(data, bits);
  const int64_t m = x.size(0), n = data.size(0);
  TORCH_CHECK(x.size(1) == cols, "x has ", x.size(1), " columns, the matrix ", cols);
  if (m >= (x.scalar_type() == at::kFloat ? kGemmRowsFloat : kGemmRowsBFloat16))
    return at::linear(x, dequantize(data, bits, x.scalar_type()));

  const at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat));
  const float* xp = xf.data_ptr<float>();
  float* yp = out.data_ptr<float>();
  const uint8_t* dp = data.data_ptr<uint8_t>();
  const int64_t row_bytes = data.size(1);
  const int64_t tiles = (n + kTile - 1) / kTile;
#if STRATA_INT16_ROWS
  const bool int16 = m <= kInt16Rows;  // then x is rounded once, for every tile
  XInt16 xq;
  if (int16) round_x(xp, m, cols, xq);
#endif

  at::parallel_for(0, tiles, 4, [&](int64_t begin, int64_t end) {
    float res[kRows * kTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kTile, valid = std::min(kTile, n - n0);
      for (int64_t i0 = 0; i0 < m; i0 += kRows) {
        const int64_t mt = std::min(kRows, m - i0);
        const float* xi = xp + i0 * cols;
#if STRATA_INT16_ROWS
        if (int16 && mt == 2)
          tile_product_int16<2>(bits, dp, row_bytes, n0, valid, n, xq, cols, res);
        else if (int16)
          tile_product_int16<1>(bits, dp, row_bytes, n0, valid, n, xq, cols, res);
        else
#endif
        switch (mt) {
          case 8: tile_product<8>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 7: tile_product<7>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 6: tile_product<6>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 5: tile_product<5>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 4: tile_product<4>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 3: tile_product<3>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          case 2: tile_product<2>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
          default: tile_product<1>(bits, dp, row_bytes, n0, valid, n - 1, xi, cols, res); break;
        }
        for (int64_t i = 0; i < mt; ++i)
          for (int64_t j = 0; j < valid; ++j) yp[(i0 + i) * n + n0 + j] = res[i * kTile + j];
      }
    }
  });
  return x.scalar_type() == at::kFloat || float_sums ? out : out.to(x.scalar_type());
}

}  // namespace

TORCH_LIBRARY(strata_quant, m) {
  m.def("linear(Tensor x, Tensor data, int bits, bool float_sums=False) -> Tensor");
  m.def("dequantize(Tensor data, int bits, ScalarType dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_quant, CPU, m) {
  m.impl("linear", &linear);
  m.impl("dequantize", &dequantize);
}
