// Runs a test's engine with f32 activations: the best kernel level below the BF16-dot-product
// one (which rounds activations to bf16 for BF16 weights, as a bf16 model would). Tests that
// compare against a float32 reference (PyTorch / transformers computing on BF16 weights upcast)
// need the reference's arithmetic; on an AVX-512 BF16 machine the default level would differ from
// it by bf16 rounding (0.14 in the logits of the bf16 dense Qwen3), not by a bug.
#pragma once

#include "kernels/kernels.hpp"

namespace steermoe::test_support {

class F32ActivationKernels {
 public:
  F32ActivationKernels() : saved_(kernels::active_isa()) {
    for (kernels::Isa isa : {kernels::Isa::kAvx512, kernels::Isa::kAvx2, kernels::Isa::kScalar}) {
      if (kernels::isa_available(isa)) {
        kernels::set_active_isa(isa);
        break;
      }
    }
  }
  ~F32ActivationKernels() { kernels::set_active_isa(saved_); }
  F32ActivationKernels(const F32ActivationKernels&) = delete;
  F32ActivationKernels& operator=(const F32ActivationKernels&) = delete;

 private:
  kernels::Isa saved_;
};

}  // namespace steermoe::test_support
