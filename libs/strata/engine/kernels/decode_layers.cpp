// A decode step's decoder layers in one call, x (the float32 residual stream) updated in place:
// the same ops model.py's DecoderLayer.forward calls for a step whose rows are all decodes (one
// new token a sequence) over the fused CPU attention kernel, called through the dispatcher in the
// same order on the same inputs, so its result equals the Python loop's bit for bit. What it
// removes is the Python around some ten ops a layer (argument parsing, module attribute lookups,
// view bookkeeping): per-step fixed cost, which bounds one sequence's decode of a small model.
//
// Each layer i reads norms[2i] (input) and norms[2i+1] (post-attention), and four projections
// 4i..4i+3 (q|k|v, o, gate|up, down), each given as kinds[j] with weights[j] and biases[j]:
//   0 at::linear(x, weight, bias)                       (float weights oneDNN does not pack)
//   1 mkldnn::_linear_pointwise(x, weight, bias, ...)   (weight: Packs' packed copy)
//   2 strata_bf16::linear(x, weight)                    (one row of bfloat16)
//   3 strata_f32::linear(x, weight)                     (a few rows of float32)
//   4, 8 strata_quant::linear(x, data, bits)            (a QuantLinear's blocks)
// The ops a kind names must be registered (their libraries loaded) before the call.

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

namespace {

template <typename Sig>
c10::TypedOperatorHandle<Sig> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// The signatures of the ops the layers call, as their kernels are registered.
using RmsNorm = at::Tensor(const at::Tensor&, const at::Tensor&, double);
using AddRmsNorm = at::Tensor(at::Tensor, const at::Tensor&, const at::Tensor&, double);
using RotaryKv = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor,
                            at::Tensor, const at::Tensor&, int64_t);
using Attention = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&, double);
using SiluMul = at::Tensor(const at::Tensor&);
using Bf16Linear = at::Tensor(const at::Tensor&, const at::Tensor&, bool);
using F32Linear = at::Tensor(const at::Tensor&, const at::Tensor&);
using QuantLinear = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool);

// The ops every layer calls, looked up at first use (a kind's library may load after this one).
struct Ops {
  c10::TypedOperatorHandle<RmsNorm> rms_norm = typed_op<RmsNorm>("strata_norm::rms_norm");
  c10::TypedOperatorHandle<AddRmsNorm> add_rms_norm =
      typed_op<AddRmsNorm>("strata_norm::add_rms_norm");
  c10::TypedOperatorHandle<RotaryKv> rotary_kv = typed_op<RotaryKv>("strata_rope::rotary_kv");
  c10::TypedOperatorHandle<Attention> attention = typed_op<Attention>("strata::decode_attention");
  c10::TypedOperatorHandle<SiluMul> silu_mul = typed_op<SiluMul>("strata_swiglu::silu_mul");
};

const Ops& ops() {
  static const Ops o;
  return o;
}

at::Tensor project(int64_t kind, const at::Tensor& x, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias) {
  switch (kind) {
    case 0:
      return at::linear(x, weight, bias);
    case 1: {
      static const c10::OperatorHandle op =
          c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
      torch::jit::Stack stack{x, weight, bias, std::string("none"),
                              c10::List<std::optional<c10::Scalar>>(), std::string("")};
      op.callBoxed(&stack);
      return stack[0].toTensor();
    }
    case 2: {
      static const auto op = typed_op<Bf16Linear>("strata_bf16::linear");
      return op.call(x, weight, false);
    }
    case 3: {
      static const auto op = typed_op<F32Linear>("strata_f32::linear");
      return op.call(x, weight);
    }
    case 4:
    case 8: {
      static const auto op = typed_op<QuantLinear>("strata_quant::linear");
      return op.call(x, weight, kind, false);
    }
    default:
      TORCH_CHECK(false, "unknown projection kind ", kind);
  }
}

void decode_layers(at::Tensor x, at::TensorList norms, at::TensorList weights,
                   const c10::List<std::optional<at::Tensor>>& biases, at::IntArrayRef kinds,
                   const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& kv_cache,
                   const at::Tensor& slot_mapping, const at::Tensor& token_index,
                   const at::Tensor& block_tables, const at::Tensor& context_lens, int64_t heads,
                   double scale, double eps) {
  const int64_t layers = kv_cache.size(0);
  TORCH_CHECK(kv_cache.dim() == 6 && kv_cache.size(1) == 2,
              "kv_cache must be [layers, 2, kv_heads, blocks, block_size, head_dim]");
  TORCH_CHECK(static_cast<int64_t>(norms.size()) == 2 * layers,
              "two norm weights a layer are needed, got ", norms.size(), " for ", layers);
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == 4 * layers &&
                  static_cast<int64_t>(biases.size()) == 4 * layers &&
                  static_cast<int64_t>(kinds.size()) == 4 * layers,
              "four projections a layer are needed (weights, biases and kinds)");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x must be contiguous [rows, hidden]");
  const Ops& o = ops();
  const at::Tensor c = cos.contiguous(), s = sin.contiguous();
  const int64_t t = x.size(0);
  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor kv = kv_cache.select(0, i);
    const at::Tensor k_cache = kv.select(0, 0), v_cache = kv.select(0, 1);
    const int64_t j = 4 * i;
    at::Tensor h = o.rms_norm.call(x, norms[2 * i], eps);
    const at::Tensor qkv = project(kinds[j], h, weights[j], biases.get(j));
    const at::Tensor q = o.rotary_kv.call(qkv, c, s, k_cache, v_cache, slot_mapping, heads);
    const at::Tensor attn = o.attention.call(q.index_select(0, token_index), k_cache, v_cache,
                                             block_tables, context_lens, scale);
    h = o.add_rms_norm.call(x, project(kinds[j + 1], attn.view(q.sizes()).reshape({t, -1}),
                                       weights[j + 1], biases.get(j + 1)),
                            norms[2 * i + 1], eps);
    const at::Tensor gate_up = project(kinds[j + 2], h, weights[j + 2], biases.get(j + 2));
    x.add_(project(kinds[j + 3], o.silu_mul.call(gate_up), weights[j + 3], biases.get(j + 3)));
  }
}

}  // namespace

TORCH_LIBRARY(strata_layers, m) {
  m.def("decode_layers(Tensor(a!) x, Tensor[] norms, Tensor[] weights, Tensor?[] biases, "
        "int[] kinds, Tensor cos, Tensor sin, Tensor(b!) kv_cache, Tensor slot_mapping, "
        "Tensor token_index, Tensor block_tables, Tensor context_lens, int heads, float scale, "
        "float eps) -> ()");
}

TORCH_LIBRARY_IMPL(strata_layers, CPU, m) {
  m.impl("decode_layers", &decode_layers);
}

// a packed weight (kind 1) is an oneDNN tensor, whose dispatch key the call then takes
TORCH_LIBRARY_IMPL(strata_layers, MkldnnCPU, m) {
  m.impl("decode_layers", &decode_layers);
}
