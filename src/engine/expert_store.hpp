// The expert store: maps (MoE layer, expert, cache slot) to the expert's weights in memory.
// Backends read experts only through it; links write into it. The policy and the scheduler see
// only indices.
//
// Implementations: the all-resident stores (the resident and sim links, the logical-cache
// engine): every expert copied once into an arena of 2 MiB pages (engine/expert_cache.cpp), or
// ResidentExpertStore, every expert in place in the mapped model file, where an expert has no
// host bytes to copy; and the slot stores of the offloading links (RAM slots filled from disk
// or through an emulated link; device slots later).
#pragma once

#include "model/weights.hpp"

namespace steermoe::engine {

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Weights of `expert` of MoE layer `moe_layer` (model layer `layer`) as held in cache slot
  // `slot` of that layer. The caller has waited for the slot's latest copy. The reference stays
  // valid until the next call for the same (moe_layer, slot).
  virtual const model::SwigluWeights& expert(int moe_layer, int layer, int expert, int slot) = 0;
  // True if every expert is addressable at once without copies (a batched prefill may then read
  // any expert of a layer in one block call).
  virtual bool all_resident() const = 0;
};

class ResidentExpertStore final : public ExpertStore {
 public:
  explicit ResidentExpertStore(const model::Model& model) : model_(model) {}
  const model::SwigluWeights& expert(int /*moe_layer*/, int layer, int expert,
                                     int /*slot*/) override {
    return model_.layer(layer).experts[static_cast<size_t>(expert)];
  }
  bool all_resident() const override { return true; }

 private:
  const model::Model& model_;
};

}  // namespace steermoe::engine
