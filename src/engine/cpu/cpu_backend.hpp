// The CPU compute backend: the block sequences of ops_backend.hpp over the CPU op set
// (cpu_ops.hpp): fp32 activations, weights of every stored type used in place from the mapped
// file, an f32 KV cache in RAM and, for the hybrid families, the recurrent state of each Gated
// DeltaNet layer (reset when a sequence starts, position 0). Every buffer is sized at
// construction for `max_batch` tokens and the full context, so decoding allocates nothing.
#pragma once

#include "engine/ops_backend.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

struct CpuBackendParams {
  int threads = 1;    // kernel threads (1..1024)
  int context = 1;    // KV cache positions
  int max_batch = 1;  // tokens per block call
  // Gated DeltaNet batched prefill (EngineParams::gdn_prefill).
  DeltaRulePrefill gdn_prefill = DeltaRulePrefill::kRecurrent;
};

class CpuBackend final : public OpsBackend {
 public:
  CpuBackend(const model::Model& model, const CpuBackendParams& params);
};

}  // namespace steermoe::engine
