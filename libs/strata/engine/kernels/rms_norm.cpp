// RMSNorm over the last dimension of a [rows, hidden] float32 or bfloat16 tensor, in one pass a
// row: y = weight * (x * rsqrt(mean(x^2) + eps)), the normalized row rounded to x's dtype before
// the weight multiplies it, as the engine's torch expression computes it (model.rms_norm). Each
// row is one task of torch's thread pool; a decode step's single row runs inline.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

#include "cpu_math.h"

template <typename scalar_t>
void rms_norm_impl(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  const scalar_t* xp = x.data_ptr<scalar_t>();
  const scalar_t* wp = weight.data_ptr<scalar_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  std::vector<float> w(hidden);
  widen_row(wp, w.data(), hidden);
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(hidden);
    for (int64_t r = begin; r < end; ++r) {
      widen_row(xp + r * hidden, row.data(), hidden);
      const float squares = dot(row.data(), row.data(), hidden);
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(hidden) + feps);
      for (int64_t i = 0; i < hidden; ++i) {
        // round the normalized value to scalar_t, then multiply in float and round again
        const float normed = static_cast<float>(static_cast<scalar_t>(row[i] * inv));
        row[i] = w[i] * normed;
      }
      store_row(row.data(), op + r * hidden, hidden);
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x must be contiguous [rows, hidden]");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.is_contiguous(),
              "weight must be contiguous [hidden]");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight and x must share a dtype");
  at::Tensor out = at::empty_like(x);
  if (x.scalar_type() == at::kFloat)
    rms_norm_impl<float>(x, weight, eps, out);
  else if (x.scalar_type() == at::kBFloat16)
    rms_norm_impl<c10::BFloat16>(x, weight, eps, out);
  else
    TORCH_CHECK(false, "rms_norm supports float32 and bfloat16, got ", x.scalar_type());
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_norm, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_norm, CPU, m) {
  m.impl("rms_norm", &rms_norm);
}
