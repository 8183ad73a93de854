// SwiGLU's activation for the CPU: silu(gate) * up from a [rows, 2 * inter] gate|up tensor (the
// fused projection's output) into a new [rows, inter] tensor, in one pass. silu(g) = g *
// sigmoid(g), with sigmoid from exp of a non-positive number (cpu_math.h, 2.3e-7 relative error),
// so the loop vectorizes; in bfloat16 the activation is rounded before the product, as torch's
// F.silu(gate).mul_(up) rounds it.

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

template <typename scalar_t>
void silu_mul_impl(const at::Tensor& gate_up, at::Tensor& out) {
  const int64_t rows = out.size(0), inter = out.size(1);
  const scalar_t* gp = gate_up.data_ptr<scalar_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> g(inter), u(inter);
    for (int64_t r = begin; r < end; ++r) {
      widen_row(gp + r * 2 * inter, g.data(), inter);
      widen_row(gp + r * 2 * inter + inter, u.data(), inter);
#pragma omp simd
      for (int64_t i = 0; i < inter; ++i) {
        const float x = g[i];
        const float e = exp_nonpositive(-std::fabs(x));
        const float sig = x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
        const float act = static_cast<float>(static_cast<scalar_t>(x * sig));
        g[i] = act * u[i];
      }
      store_row(g.data(), op + r * inter, inter);
    }
  });
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "gate_up must be contiguous [rows, 2 * inter]");
  at::Tensor out = at::empty({gate_up.size(0), gate_up.size(1) / 2}, gate_up.options());
  if (gate_up.scalar_type() == at::kFloat)
    silu_mul_impl<float>(gate_up, out);
  else if (gate_up.scalar_type() == at::kBFloat16)
    silu_mul_impl<c10::BFloat16>(gate_up, out);
  else
    TORCH_CHECK(false, "silu_mul supports float32 and bfloat16, got ", gate_up.scalar_type());
  return out;
}

}  // namespace

TORCH_LIBRARY(strata_swiglu, m) {
  m.def("silu_mul(Tensor gate_up) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_swiglu, CPU, m) {
  m.impl("silu_mul", &silu_mul);
}
