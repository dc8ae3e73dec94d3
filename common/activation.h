// The activations of a layer's elementwise kernels (common/graph.h,
// Activation): the backends compute them in fp32, the float64 reference in
// double, from the same formulas.
#pragma once

#include <cmath>

namespace overlap {

// GELU, tanh approximation (Megatron-LM's and TransformerEngine's):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
T Gelu(T x) {
  const T sqrt_2_over_pi = static_cast<T>(0.7978845608028654);
  return static_cast<T>(0.5) * x *
         (static_cast<T>(1) + std::tanh(sqrt_2_over_pi * (x + static_cast<T>(0.044715) * x * x * x)));
}

// SiLU (swish): x sigmoid(x). SwiGLU is SiLU(gate) x up.
template <typename T>
T Silu(T x) {
  return x / (static_cast<T>(1) + std::exp(-x));
}

}  // namespace overlap
