#include "engine/cpu/cpu_backend.hpp"

#include <memory>

#include "engine/cpu/cpu_ops.hpp"

namespace steermoe::engine {

namespace {

std::unique_ptr<Ops> cpu_ops(const model::ModelConfig& c, const CpuBackendParams& p) {
  return std::make_unique<CpuOps>(CpuOpsParams{.threads = p.threads,
                                               .max_batch = p.max_batch,
                                               .hidden = c.hidden,
                                               .expert_ffn = c.expert_ffn,
                                               .experts = c.experts,
                                               .top_k = c.top_k,
                                               .gdn_prefill = p.gdn_prefill});
}

}  // namespace

CpuBackend::CpuBackend(const model::Model& model, const CpuBackendParams& params)
    : OpsBackend(model, cpu_ops(model.config(), params), params.context, params.max_batch) {}

}  // namespace steermoe::engine
