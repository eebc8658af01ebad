// Compiled instead of engine/cuda/ when the build has no CUDA (STEERMOE_CUDA=OFF).
#include "common/error.hpp"
#include "engine/cuda_backend_factory.hpp"

namespace steermoe::engine {

bool cuda_backend_available(std::string* why) {
  if (why != nullptr)
    *why = "this steermoe was built without CUDA (configure with -DSTEERMOE_CUDA=ON)";
  return false;
}

std::string cuda_device_summary() {
  return "none (built without CUDA)";
}

std::unique_ptr<ComputeBackend> make_cuda_backend(const model::Model& /*model*/,
                                                  const CudaBackendParams& /*params*/) {
  std::string why;
  (void)cuda_backend_available(&why);
  fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
}

std::unique_ptr<Ops> make_cuda_ops(const CudaOpsParams& /*params*/) {
  std::string why;
  (void)cuda_backend_available(&why);
  fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
}

std::unique_ptr<CudaExperts> make_cuda_experts(const model::Model& /*model*/,
                                               const link::ExpertLayout& /*layout*/,
                                               int /*cache_slots*/, double /*test_delay_max_s*/,
                                               uint64_t /*test_delay_seed*/) {
  std::string why;
  (void)cuda_backend_available(&why);
  fail("--link", "cuda", "expected a usable CUDA backend, found {}", why);
}

}  // namespace steermoe::engine
