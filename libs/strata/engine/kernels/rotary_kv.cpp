// One step's rotary position embedding and KV-cache write, in one pass over its qkv rows: the
// query and key heads rotated (rotate-half layout, as rope.py's apply_rotary), the keys and
// values written into the paged cache at their slots (attention.py's layout), the rotated
// queries returned. Each product and sum is rounded to the tensor's dtype as torch's expression
// x * cos + rotate_half(x) * sin rounds it (no fused multiply-add), so the results equal the
// torch path's bit for bit.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <initializer_list>

namespace {

template <typename scalar_t>
__attribute__((optimize("fp-contract=off"))) inline void rotate(
    const scalar_t* x, const scalar_t* cos, const scalar_t* sin, int64_t dim, scalar_t* out) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < dim; ++i) {
    const float r = i < half ? -static_cast<float>(x[i + half]) : static_cast<float>(x[i - half]);
    // each product and the sum rounded to scalar_t, as torch computes them
    const scalar_t a = static_cast<scalar_t>(static_cast<float>(x[i]) * static_cast<float>(cos[i]));
    const scalar_t b = static_cast<scalar_t>(static_cast<scalar_t>(r) * static_cast<float>(sin[i]));
    out[i] = static_cast<scalar_t>(static_cast<float>(a) + static_cast<float>(b));
  }
}

template <typename scalar_t>
void rotary_kv_impl(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                    at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& slots,
                    int64_t heads, at::Tensor& q) {
  const int64_t tokens = qkv.size(0), dim = cos.size(1), kv_heads = k_cache.size(0);
  const int64_t block_size = k_cache.size(2), row = qkv.stride(0);
  const scalar_t* src = qkv.data_ptr<scalar_t>();
  const scalar_t* cp = cos.data_ptr<scalar_t>();
  const scalar_t* sp = sin.data_ptr<scalar_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  scalar_t* qp = q.data_ptr<scalar_t>();
  scalar_t* kp = k_cache.data_ptr<scalar_t>();
  scalar_t* vp = v_cache.data_ptr<scalar_t>();
  const int64_t kh = k_cache.stride(0), kb = k_cache.stride(1), ks = k_cache.stride(2);
  const int64_t vh = v_cache.stride(0), vb = v_cache.stride(1), vs = v_cache.stride(2);
  at::parallel_for(0, tokens, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const scalar_t* x = src + t * row;
      const scalar_t* c = cp + t * dim;
      const scalar_t* s = sp + t * dim;
      for (int64_t h = 0; h < heads; ++h)
        rotate(x + h * dim, c, s, dim, qp + (t * heads + h) * dim);
      const int64_t block = slot[t] / block_size, off = slot[t] % block_size;
      for (int64_t h = 0; h < kv_heads; ++h) {
        rotate(x + (heads + h) * dim, c, s, dim, kp + h * kh + block * kb + off * ks);
        const scalar_t* v = x + (heads + kv_heads + h) * dim;
        scalar_t* vd = vp + h * vh + block * vb + off * vs;
        for (int64_t i = 0; i < dim; ++i) vd[i] = v[i];
      }
    }
  });
}

at::Tensor rotary_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                     at::Tensor k_cache, at::Tensor v_cache, const at::Tensor& slots,
                     int64_t heads) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.stride(1) == 1, "qkv must be [tokens, columns], rows dense");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.sizes() == sin.sizes() &&
                  cos.dim() == 2 && cos.size(0) == qkv.size(0),
              "cos and sin must be contiguous [tokens, head_dim]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
              "caches must be [kv_heads, blocks, block_size, head_dim] with dense rows");
  const int64_t dim = cos.size(1), kv_heads = k_cache.size(0);
  TORCH_CHECK(k_cache.size(3) == dim, "the caches' head_dim differs from cos's");
  TORCH_CHECK(qkv.size(1) == (heads + 2 * kv_heads) * dim, "qkv has ", qkv.size(1),
              " columns, (heads + 2 kv_heads) x head_dim is ", (heads + 2 * kv_heads) * dim);
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous() &&
                  slots.numel() == qkv.size(0),
              "slot_mapping must be contiguous int64 [tokens]");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&cos, &sin, &k_cache, &v_cache})
    TORCH_CHECK(t->scalar_type() == qkv.scalar_type(), "all tensors must share qkv's dtype");
  at::Tensor q = at::empty({qkv.size(0), heads, dim}, qkv.options());
  if (qkv.scalar_type() == at::kFloat)
    rotary_kv_impl<float>(qkv, cos, sin, k_cache, v_cache, slots, heads, q);
  else if (qkv.scalar_type() == at::kBFloat16)
    rotary_kv_impl<c10::BFloat16>(qkv, cos, sin, k_cache, v_cache, slots, heads, q);
  else
    TORCH_CHECK(false, "rotary_kv supports float32 and bfloat16, got ", qkv.scalar_type());
  return q;
}

}  // namespace

TORCH_LIBRARY(strata_rope, m) {
  m.def("rotary_kv(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor slots, int heads) -> Tensor");
}

TORCH_LIBRARY_IMPL(strata_rope, CPU, m) {
  m.impl("rotary_kv", &rotary_kv);
}
