// The routed experts of a loaded model as byte ranges of its file(s), for the links that move
// experts into cache slots (link::ExpertLayout), and the expert's matrices re-pointed into a
// slot once a copy has filled it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "link/expert_layout.hpp"
#include "model/weights.hpp"

namespace steermoe::model {

// For every MoE layer m (in model order) and expert e: three parts, gate, up and down, in this
// order, each the matrix's element bytes in the stored type (kernels::matrix_ranges range 0; equal to
// model::matrix_bytes except for FP8, whose small block scales stay resident and are not
// moved) with the file holding it (the GGUF file,
// or the safetensors shard, in shard order) and its offset there, and the matrix's pointer in the
// mapping as the host source. Works for every expert layout the loader accepts (GGUF stacked,
// HF per-expert, HF fused gate_up/down: gate and up are then adjacent slices of one tensor). An
// expert matrix converted at load time (F64 stored) has no file range (file -1): such a model
// can be served by the emulated link, not by the disk link. Quantized experts (Q8_0 .. Q6_K,
// FP8) stay in place, so the links move the quantized bytes.
link::ExpertLayout expert_layout(const Model& model);

// Expert `expert` of MoE layer `moe_layer` as it lies in `slot` after a copy made with `layout`
// (from expert_layout(model)): the original's dtype, rows, cols and stride, data pointers at the
// parts' slot offsets. `original` is model.layer(l).experts[expert].
SwigluWeights rebase_expert(const SwigluWeights& original, const link::ExpertLayout& layout,
                            int32_t moe_layer, int32_t expert, const std::byte* slot);

}  // namespace steermoe::model
