// The greedy pick for the CPU: per row of a [rows, vocab] float32 or bfloat16 tensor, its maximum
// (as float32) and the index of its first occurrence, as torch.max(x.float(), dim=-1) gives them,
// without the float32 copy. A row holding a nan gives nan and the index of its first nan (torch.max
// propagates nan). Two vectorized passes a row: the maximum and whether any nan, then the first
// block of 256 that holds it, then its index there.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

namespace {

constexpr int64_t kBlock = 256;

inline float as_float(float x) { return x; }
inline float as_float(c10::BFloat16 x) { return static_cast<float>(x); }

template <typename scalar_t>
void row_max_impl(const at::Tensor& x, at::Tensor& values, at::Tensor& indices) {
  const int64_t rows = x.size(0), vocab = x.size(1);
  const scalar_t* xp = x.data_ptr<scalar_t>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = indices.data_ptr<int64_t>();
  at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* row = xp + r * vocab;
      float best = -std::numeric_limits<float>::infinity();
      int nans = 0;
#pragma omp simd reduction(max : best) reduction(| : nans)
      for (int64_t i = 0; i < vocab; ++i) {
        const float v = as_float(row[i]);
        nans |= v != v;
        best = v > best ? v : best;
      }
      int64_t at = 0;
      if (nans) {
        while (!std::isnan(as_float(row[at]))) ++at;
        best = std::numeric_limits<float>::quiet_NaN();
      } else {
        // the first block of kBlock holding the maximum, found by vectorized tests, then its
        // first index
        int64_t b = 0;
        for (; b + kBlock <= vocab; b += kBlock) {
          int hit = 0;
#pragma omp simd reduction(| : hit)
          for (int64_t i = b; i < b + kBlock; ++i) hit |= as_float(row[i]) == best;
          if (hit) break;
        }
        at = b;
        while (at < vocab - 1 && as_float(row[at]) != best) ++at;
      }
      vp[r] = best;
      ip[r] = at;
    }
  });
}

std::tuple<at::Tensor, at::Tensor> row_max(const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), "strata_greedy::row_max runs on the CPU only");
  TORCH_CHECK(x.dim() == 2 && x.size(1) > 0, "expected logits [rows, vocab] with vocab > 0");
  auto xc = x.contiguous();
  auto values = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  auto indices = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  switch (x.scalar_type()) {
    case at::kFloat:
      row_max_impl<float>(xc, values, indices);
      break;
    case at::kBFloat16:
      row_max_impl<c10::BFloat16>(xc, values, indices);
      break;
    default:
      TORCH_CHECK(false, "strata_greedy::row_max supports float32 and bfloat16, got ",
                  x.scalar_type());
  }
  return {values, indices};
}

}  // namespace

TORCH_LIBRARY(strata_greedy, m) { m.def("row_max(Tensor x) -> (Tensor, Tensor)"); }

TORCH_LIBRARY_IMPL(strata_greedy, CPU, m) { m.impl("row_max", &row_max); }
