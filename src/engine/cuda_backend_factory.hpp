// The engine's only view of the CUDA compute backend: a factory and two queries, with no CUDA
// headers, so the CPU build (STEERMOE_CUDA=OFF) never sees CUDA. Implemented in engine/cuda/
// when built with -DSTEERMOE_CUDA=ON; otherwise engine/cuda_stub.cpp answers "built without
// CUDA".
#pragma once

#include <memory>
#include <string>

#include "engine/backend.hpp"
#include "model/weights.hpp"

namespace steermoe::engine {

struct CudaBackendParams {
  int context = 1;    // KV cache positions
  int max_batch = 1;  // tokens per block call
  int device = 0;     // CUDA device ordinal
  // Upload every routed expert to device memory at construction (the all-resident store);
  // otherwise experts are copied in from the host store's memory when a call needs them, into
  // C device slots per MoE layer.
  bool upload_experts = true;
  int cache_slots = 0;  // C device slots per MoE layer when experts are not uploaded
  bool quiet = false;   // no device report on stderr
};

// True if this binary was built with CUDA and a CUDA device is usable; otherwise false with the
// reason in `why` (when not null).
bool cuda_backend_available(std::string* why);

// "NVIDIA H200 (sm_90), 139.8 GiB device memory, 139.1 GiB free" or the reason there is none.
std::string cuda_device_summary();

// The CUDA backend for `model` (non-expert weights uploaded now). Throws steermoe::Error when
// built without CUDA, when no device is present, or when the model does not fit.
std::unique_ptr<ComputeBackend> make_cuda_backend(const model::Model& model,
                                                  const CudaBackendParams& params);

}  // namespace steermoe::engine
