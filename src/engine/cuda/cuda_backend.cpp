// The CUDA compute backend (see cuda_backend_factory.hpp and README.md here): the block
// sequences of ops_backend.hpp over the GPU op set (cuda_ops.cpp). This file only checks that
// the model fits the device, reports it, and uploads the routed experts when they are resident.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/error.hpp"
#include "engine/cuda/cuda_util.hpp"
#include "engine/cuda_backend_factory.hpp"
#include "engine/ops_backend.hpp"

namespace steermoe::engine {
namespace {

size_t swiglu_bytes(const model::SwigluWeights& w) {
  if (!w.present()) return 0;
  return kernels::stored_bytes(w.gate) + kernels::stored_bytes(w.up) +
         kernels::stored_bytes(w.down);
}

double gib(size_t b) {
  return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
}

// Bytes of the non-expert weights (what OpsBackend prepares) and of the largest expert.
struct WeightBytes {
  size_t weights = 0;
  size_t expert = 0;
  size_t all_experts = 0;
};
WeightBytes weight_bytes(const model::Model& model) {
  const model::ModelConfig& c = model.config();
  WeightBytes out{.weights = kernels::stored_bytes(model.lm_head()) +
                             static_cast<size_t>(c.hidden) * sizeof(float)};
  for (int l = 0; l < c.layers; ++l) {
    const model::LayerWeights& w = model.layer(l);
    const model::LinearAttnWeights& la = w.linear;
    for (const kernels::Matrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.q_a, &w.q_b, &w.kv_a, &w.kv_b,
                                     &w.router, &la.qkv, &la.z, &la.b, &la.a, &la.out})
      out.weights += m->data == nullptr ? 0 : kernels::stored_bytes(*m);
    out.weights += swiglu_bytes(w.shared) + swiglu_bytes(w.dense);
    for (const model::SwigluWeights& e : w.experts) {
      out.expert = std::max(out.expert, swiglu_bytes(e));
      out.all_experts += swiglu_bytes(e);
      if (weight_type(e.gate.dtype) != weight_type(w.experts[0].gate.dtype) ||
          weight_type(e.up.dtype) != weight_type(e.gate.dtype) ||
          weight_type(e.down.dtype) != weight_type(e.gate.dtype))
        fail(model.path().string(), "experts",
             "expected every expert matrix in one dtype for the CUDA backend, found a mix");
    }
  }
  return out;
}

// What the model needs on the device, checked against free memory before any upload.
void check_device_memory(const model::Model& model, const CudaBackendParams& params,
                         const WeightBytes& wb) {
  const model::ModelConfig& c = model.config();
  const auto B = static_cast<size_t>(params.max_batch);
  const auto ctx = static_cast<size_t>(params.context);
  const auto heads = static_cast<size_t>(c.heads);
  size_t experts = params.upload_experts ? wb.all_experts : 0;
  if (!params.upload_experts && !params.experts_on_device)
    experts = static_cast<size_t>(c.moe_layer_count()) * static_cast<size_t>(params.cache_slots) *
              wb.expert;
  size_t kv_layers = 0;
  for (int l = 0; l < c.layers; ++l) kv_layers += c.is_linear(l) ? 0 : 1;
  const size_t kv_bytes = kv_layers * ctx * static_cast<size_t>(c.kv_heads) *
                          static_cast<size_t>(c.q_head_dim() + c.v_dim()) * sizeof(float);
  // Activations: dominated by the attention scratch and the batch's logits.
  const size_t act =
      sizeof(float) *
      (B * heads * ctx + B * static_cast<size_t>(c.vocab) +
       16 * B *
           static_cast<size_t>(std::max({c.hidden, c.heads * c.q_head_dim(), c.expert_ffn,
                                         c.shared_ffn, c.dense_ffn, c.linear.conv_dim()})));
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const size_t need = wb.weights + experts + kv_bytes + act + (256u << 20);  // + runtime margin
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, params.device), "cudaGetDeviceProperties");
  if (!params.quiet) {
    std::fprintf(stderr,
                 "cuda: %s (sm_%d%d), %.1f GiB device memory, %.1f GiB free; needs %.2f GiB "
                 "(weights %.2f, experts %.2f %s, KV %.2f, activations %.2f)\n",
                 prop.name, prop.major, prop.minor, gib(total_b), gib(free_b), gib(need),
                 gib(wb.weights), gib(experts),
                 params.upload_experts      ? "all resident"
                 : params.experts_on_device ? "in cuda link slots, counted there"
                                            : "in device slots",
                 gib(kv_bytes), gib(act));
  }
  if (need > free_b) {
    fail(model.path().string(), "device memory",
         "expected the model to fit on {} at this residency ({:.2f} GiB: weights {:.2f}, experts "
         "{:.2f}, KV cache {:.2f}), found {:.2f} GiB free; lower --residency with an offloading "
         "--link, or -c",
         prop.name, gib(need), gib(wb.weights), gib(experts), gib(kv_bytes), gib(free_b));
  }
}

// The GPU op set for `model`, its routed experts uploaded when they are all resident.
std::unique_ptr<Ops> model_ops(const model::Model& model, const CudaBackendParams& params) {
  const model::ModelConfig& c = model.config();
  const WeightBytes wb = weight_bytes(model);
  check_device_memory(model, params, wb);
  std::unique_ptr<Ops> ops = make_cuda_ops(
      {.device = params.device,
       .max_batch = params.max_batch,
       .context = params.context,
       .max_heads = c.heads,
       .hidden = c.hidden,
       .expert_ffn = c.expert_ffn,
       .top_k = c.top_k,
       .experts_on_device = params.experts_on_device,
       .cache_slots = params.upload_experts || params.experts_on_device ? 0 : params.cache_slots,
       .expert_bytes = wb.expert,
       .moe_index = c.moe_index()});
  if (params.upload_experts) {
    for (int l = 0; l < c.layers; ++l) {
      for (const model::SwigluWeights& e : model.layer(l).experts) {
        ops->prepare(e.gate);
        ops->prepare(e.up);
        ops->prepare(e.down);
      }
    }
  }
  return ops;
}

class CudaBackend final : public OpsBackend {
 public:
  CudaBackend(const model::Model& model, const CudaBackendParams& params)
      : OpsBackend(model, model_ops(model, params), params.context, params.max_batch) {}
};

}  // namespace

bool cuda_backend_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why != nullptr)
      *why = err != cudaSuccess ? fmt::format("no usable CUDA device ({})", cudaGetErrorString(err))
                                : std::string("no CUDA device present");
    return false;
  }
  return true;
}

std::string cuda_device_summary() {
  std::string why;
  if (!cuda_backend_available(&why)) return why;
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return fmt::format("{} (sm_{}{}), {:.1f} GiB device memory, {:.1f} GiB free", prop.name,
                     prop.major, prop.minor, gib(total_b), gib(free_b));
}

std::unique_ptr<ComputeBackend> make_cuda_backend(const model::Model& model,
                                                  const CudaBackendParams& params) {
  std::string why;
  if (!cuda_backend_available(&why))
    fail("--backend", "cuda", "expected a usable CUDA backend, found {}", why);
  if (!params.upload_experts && params.cache_slots < 1)
    fail("--backend", "cuda", "expected >= 1 device slot per MoE layer, found {}",
         params.cache_slots);
  return std::make_unique<CudaBackend>(model, params);
}

}  // namespace steermoe::engine
