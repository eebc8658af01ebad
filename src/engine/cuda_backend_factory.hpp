// The engine's only view of the CUDA compute backend: a factory and two queries, with no CUDA
// headers, so the CPU build (STEERMOE_CUDA=OFF) never sees CUDA. Implemented in engine/cuda/
// when built with -DSTEERMOE_CUDA=ON; otherwise engine/cuda_stub.cpp answers "built without
// CUDA".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/expert_store.hpp"
#include "engine/ops.hpp"
#include "link/expert_layout.hpp"
#include "link/link.hpp"
#include "model/weights.hpp"

namespace steermoe::schedule {
class TransferScheduler;
}

namespace steermoe::engine {

struct CudaBackendParams {
  int context = 1;    // KV cache positions
  int max_batch = 1;  // tokens per block call
  int device = 0;     // CUDA device ordinal
  // Upload every routed expert to device memory at construction (the all-resident store);
  // otherwise experts are copied in from the host store's memory when a call needs them, into
  // C device slots per MoE layer.
  bool upload_experts = true;
  // The expert store hands out device pointers (the `cuda` link's device slots): used as they are.
  bool experts_on_device = false;
  int cache_slots = 0;  // C device slots per MoE layer when experts are not uploaded
  bool quiet = false;   // no device report on stderr
};

// The GPU op set alone (the op tests drive it directly; make_cuda_backend builds one for a model).
struct CudaOpsParams {
  int device = 0;      // CUDA device ordinal
  int max_batch = 1;   // tokens per op call
  int context = 1;     // attention: cache positions
  int max_heads = 1;   // attention: query heads
  int hidden = 0;      // MoE: width of an expert's input and output
  int expert_ffn = 0;  // MoE
  int top_k = 0;       // MoE: calls per token
  // Experts whose matrices were not prepare()d: device pointers handed out by the `cuda` link's
  // store, or host memory copied into `cache_slots` device slots per MoE layer (each
  // `expert_bytes`; moe_index [layers] maps a layer to its MoE index).
  bool experts_on_device = false;
  int cache_slots = 0;
  size_t expert_bytes = 0;
  std::vector<int> moe_index;
};

// Throws steermoe::Error when built without CUDA or without a device.
std::unique_ptr<Ops> make_cuda_ops(const CudaOpsParams& params);

// True if this binary was built with CUDA and a CUDA device is usable; otherwise false with the
// reason in `why` (when not null).
bool cuda_backend_available(std::string* why);

// "NVIDIA H200 (sm_90), 139.8 GiB device memory, 139.1 GiB free" or the reason there is none.
std::string cuda_device_summary();

// The CUDA backend for `model` (non-expert weights uploaded now). Throws steermoe::Error when
// built without CUDA, when no device is present, or when the model does not fit.
std::unique_ptr<ComputeBackend> make_cuda_backend(const model::Model& model,
                                                  const CudaBackendParams& params);

// The `cuda` link (--link cuda): experts in pinned host memory (the model mapping registered
// with cudaHostRegister, read-only), C device slots per MoE layer, one copy stream; a ticket is
// a CUDA event recorded after its copy, completed() queries events in order, wait() blocks the
// host on the event (the backend synchronises its compute stream after every MoE block, so a
// slot is never overwritten while a kernel reads it). Its store hands out device pointers.
class CudaExperts {
 public:
  virtual ~CudaExperts() = default;
  virtual link::Link& link() = 0;
  virtual ExpertStore& store() = 0;
  virtual void attach(const schedule::TransferScheduler* scheduler) = 0;
  virtual uint64_t device_bytes() const = 0;  // device slot memory
  virtual bool pinned() const = 0;            // host sources registered (else pageable copies)
};

// Throws steermoe::Error when built without CUDA, without a device, when the layout has no host
// sources, or when L x C slots do not fit in device memory.
// Test hook: each copy is preceded on the copy stream by a host-side sleep drawn from
// [0, test_delay_max_s) (seeded), to show outputs never depend on copy timing.
std::unique_ptr<CudaExperts> make_cuda_experts(const model::Model& model,
                                               const link::ExpertLayout& layout, int cache_slots,
                                               double test_delay_max_s = 0,
                                               uint64_t test_delay_seed = 1);

}  // namespace steermoe::engine
