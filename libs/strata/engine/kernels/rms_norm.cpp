// RMSNorm over the last dimension of a [rows, hidden] tensor x, in one pass a row:
// y = weight * (x * rsqrt(mean(x^2) + eps)), the normalized row rounded to the weight's dtype
// before the weight multiplies it, as the engine's torch expression computes it (model.rms_norm).
// x and the weight are both float32, both bfloat16, or x is float32 and the weight bfloat16 (a
// bfloat16 model whose residual stream is kept in float32); y has the weight's dtype.
// add_rms_norm first adds a residual (in the weight's dtype) into x in place (x += residual,
// rounded to x's dtype, as torch's add_), then normalizes the sum: the decoder layer's two steps
// in one pass. Each row is one task of torch's thread pool; a decode step's single row runs
// inline.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

#include "cpu_math.h"

template <typename x_t, typename w_t>
void rms_norm_impl(at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight,
                   double eps, at::Tensor& out) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  x_t* xp = x.data_ptr<x_t>();
  const w_t* rp = residual ? residual->data_ptr<w_t>() : nullptr;
  const w_t* wp = weight.data_ptr<w_t>();
  w_t* op = out.data_ptr<w_t>();
  std::vector<float> w(hidden);
  widen_row(wp, w.data(), hidden);
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(hidden);
    for (int64_t r = begin; r < end; ++r) {
      if (rp) {
        x_t* xr = xp + r * hidden;
        const w_t* rr = rp + r * hidden;
        for (int64_t i = 0; i < hidden; ++i)
          xr[i] = static_cast<x_t>(static_cast<float>(xr[i]) + static_cast<float>(rr[i]));
      }
      widen_row(xp + r * hidden, row.data(), hidden);
      const float squares = dot(row.data(), row.data(), hidden);
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(hidden) + feps);
      for (int64_t i = 0; i < hidden; ++i) {
        // round the normalized value to w_t, then multiply in float and round again
        const float normed = static_cast<float>(static_cast<w_t>(row[i] * inv));
        row[i] = w[i] * normed;
      }
      store_row(row.data(), op + r * hidden, hidden);
    }
  });
}

void check(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x must be contiguous [rows, hidden]");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.is_contiguous(),
              "weight must be contiguous [hidden]");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "rms_norm supports float32 and bfloat16, got ", x.scalar_type());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type() ||
                  (x.scalar_type() == at::kFloat && weight.scalar_type() == at::kBFloat16),
              "weight and x must share a dtype, or x be float32 and the weight bfloat16");
}

at::Tensor run(at::Tensor x, const at::Tensor* residual, const at::Tensor& weight, double eps) {
  at::Tensor out = at::empty_like(x, x.options().dtype(weight.scalar_type()));
  if (weight.scalar_type() == at::kBFloat16) {
    if (x.scalar_type() == at::kFloat)
      rms_norm_impl<float, c10::BFloat16>(x, residual, weight, eps, out);
    else
      rms_norm_impl<c10::BFloat16, c10::BFloat16>(x, residual, weight, eps, out);
  } else {
    rms_norm_impl<float, float>(x, residual, weight, eps, out);
  }
  return out;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check(x, weight);
  return run(x, nullptr, weight, eps);
}

at::Tensor add_rms_norm(at::Tensor x, const at::Tensor& residual, const at::Tensor& weight,
                        double eps) {
  check(x, weight);
  TORCH_CHECK(residual.sizes() == x.sizes() && residual.is_contiguous() &&
                  residual.scalar_type() == weight.scalar_type(),
              "residual must be contiguous, shaped like x and typed like the weight");
  return run(x, &residual, weight, eps);
}

}  // namespace

TORCH_LIBRARY(strata_norm, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm(Tensor(a!) x, Tensor residual, Tensor weight, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_norm, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
}
