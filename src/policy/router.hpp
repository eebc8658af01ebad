// The logical expert cache and the per-(token, layer) policy step of docs/policy-contract.md.
// One RequestRouter per request row: it owns the logical cache of every MoE layer. Routing reads
// only this logical state (and, in the `physical` demonstration mode only, an "issued copies"
// mask supplied by the scheduler). Nothing here allocates after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policy/calibration.hpp"
#include "policy/config.hpp"

namespace steermoe::policy {

// A logical insertion: expert `expert` now lives in slot `slot`; the physical side must copy it.
struct Copy {
  int32_t expert = 0;
  int32_t slot = 0;
};

// Implementations of top_k; all give identical results (tests compare them). kAuto picks the
// fastest the CPU supports.
enum class TopKPath : uint8_t { kAuto, kReference, kSse2, kAvx2, kAvx512 };

// Everything the step for one (token, layer) decided. Vectors are preallocated and reused.
struct Decision {
  int32_t layer = 0;
  int64_t step = 0;                    // token index within the request, from 1
  std::vector<int32_t> selected;       // S, ascending expert id (size K)
  std::vector<int32_t> selected_slot;  // slot of each selected expert (aligned with `selected`)
  std::vector<float> weights;          // execution weights aligned with `selected` (model's rule)
  std::vector<int32_t> exact;          // the router's own top-K of z, ascending
  std::vector<Copy> prefetch;          // part 1 insertions for this layer, emission order
  std::vector<Copy> demand;            // part 2 insertions, emission order
  std::vector<int32_t> evicted;        // eviction order (part 1 then part 2)
  int replaced = 0;                    // |S \ exact|
  bool has_weights = false;            // weights computed (needs weight scores for sigmoid)
};

// Logical cache of one layer: resident set R with slot map, and the eviction statistics.
class LayerCache {
 public:
  LayerCache(int experts, int slots);

  void reset(std::span<const int32_t> warm_order);  // R = first C of warm_order, stats cleared
  bool resident(int e) const { return slot_of_[e] >= 0; }
  int slot_of(int e) const { return slot_of_[e]; }
  int expert_in_slot(int s) const { return expert_in_slot_[s]; }
  int size() const { return size_; }
  int slots() const { return static_cast<int>(expert_in_slot_.size()); }
  int experts() const { return static_cast<int>(slot_of_.size()); }
  // Resident experts in ascending id order (allocates; for reports, not the hot path).
  std::vector<int32_t> resident_sorted() const;

 private:
  friend class RequestRouter;
  std::vector<int32_t> slot_of_;         // [E]: slot or -1
  std::vector<int32_t> expert_in_slot_;  // [C]: expert or -1
  int size_ = 0;
  std::vector<float> fast_, slow_;     // [E] EMAs (decay 0.5 / 0.98) of exact top-K membership
  std::vector<int64_t> last_use_;      // [E] LRU clock: step of last insertion or execution
  std::vector<float> priority_;        // [E] A priority for the current step (fixed in the step)
  std::vector<int64_t> priority_lru_;  // [E] LRU priority for the current step
  std::vector<uint8_t> protected_;     // [E] B: protected in the current step
  float range_sum_ = 0.0f;             // running range: sum of (max z - min z)
  int64_t range_count_ = 0;
  int64_t step_started_ = 0;  // step whose priorities are in priority_ (0 = none)
  // Victim keys per slot for the A priority in the current step (vector argmin): the priority of
  // the slot's expert, +inf where excluded (empty; protected or selected in key_protected_,
  // selected in key_selected_); expert ids as floats for the tie to the lower id.
  std::vector<float> key_protected_, key_selected_, slot_expert_;
};

class RequestRouter {
 public:
  // `calib` must outlive the router. cache_slots = C.
  RequestRouter(const RouterSpec& spec, const PolicyConfig& config, const Calibration& calib,
                int cache_slots);

  // New request: every layer back to its warm set; EMAs, LRU clocks, running ranges cleared.
  void reset();
  // Starts the next step (token) of every layer with input token id `token` (for the prior).
  void begin_token(int32_t token);
  // Starts the next step of one layer only. The state of layer l depends only on layer l's own
  // history, so a batched prefill may route layer-major (all tokens of layer l, then of l+1)
  // with this and make exactly the token-major decisions. Part 1 for layer l at a step runs
  // after that layer's begin_token for the step.
  void begin_token(int layer, int32_t token);

  // Part 1 for `layer` (>= 1): pregate = router `layer` applied to the MoE input of layer-1.
  // Returns the prefetch insertions (also kept in decision(layer).prefetch).
  std::span<const Copy> prefetch(int layer, std::span<const float> pregate);

  // Part 2 for `layer`: z = selection scores; weight_scores = scores the execution weights come
  // from (softmax: the logits, may be empty to reuse z; sigmoid: sigmoid(logits) without bias,
  // empty = no weights). `issued` (physical mode only): [E] mask of experts whose copies the
  // scheduler has issued for this layer.
  const Decision& select(int layer, std::span<const float> z,
                         std::span<const float> weight_scores = {},
                         std::span<const uint8_t> issued = {});

  // Speculative decoding's rollback (--spec-select rollback): after mark(steps), every layer
  // keeps its state before each of its next `steps` + 1 steps; rewind(kept) puts every layer
  // back to its state after `kept` steps since the mark (the committed positions), as if the
  // rejected ones had never been routed, and ends the mark. Returns the slots that now hold
  // another expert than before the rewind: the copies that restore them. Allocates only when a
  // mark is longer than every earlier one.
  void mark(int steps);
  int rewind(int kept);

  // Execution weights are the model's computation: replay and the simulator turn them off.
  void set_compute_weights(bool on) { compute_weights_ = on; }
  // Implementation of every ranking in the step (benchmarks and tests force one; decisions are
  // identical for all). kReference runs the plain three-selection step of the contract with the
  // scalar top-k; the others run the fused selection (one router top-K, a short continuation
  // over the bonused set, a merge) with that top-k path.
  void set_top_k_path(TopKPath path) { path_ = path; }
  TopKPath top_k_path() const { return path_; }

  const Decision& decision(int layer) const { return decisions_[layer]; }
  const LayerCache& cache(int layer) const { return caches_[layer]; }
  const RouterSpec& spec() const { return spec_; }
  const PolicyConfig& config() const { return config_; }
  // Steps (tokens) layer `layer` has begun since reset.
  int64_t step(int layer = 0) const { return layer_step_[layer]; }
  int cache_slots() const { return slots_; }

 private:
  void begin_layer_step(int layer);
  void checkpoint(int layer);
  float layer_range(int layer, std::span<const float> z);
  // range_l before this step's part 2: the calibrated range, or with range=running the mean
  // over earlier steps (part 2 adds this step's range first; the calibrated range before the
  // first step). Changes nothing.
  float range_before_step(int layer) const;
  void protect_resident(LayerCache& c, int e);
  void bonused_top_k_plain(const LayerCache& c, std::span<const float> z,
                           std::span<const uint8_t> issued, float bonus);
  bool fused_bonused_top_k(const LayerCache& c, std::span<const float> z,
                           std::span<const uint8_t> issued, float bonus);
  int insert(LayerCache& cache, int expert, int victim, int64_t step, Decision& d);
  int argmin_priority(const LayerCache& cache, bool skip_selected, bool skip_protected) const;
  static int argmin_slot_keys(const LayerCache& cache, const std::vector<float>& key);
  bool fast_argmin() const { return config_.evict == Evict::kA && path_ != TopKPath::kReference; }

  RouterSpec spec_;
  PolicyConfig config_;
  const Calibration* calib_;
  int slots_;
  int window_;
  std::vector<int64_t> layer_step_;   // [L] step of each layer (token index from 1)
  std::vector<int32_t> layer_token_;  // [L] input token of each layer's current step
  bool compute_weights_ = true;
  TopKPath path_ = TopKPath::kAuto;
  std::vector<LayerCache> caches_;
  std::vector<Decision> decisions_;
  // mark()/rewind(): per layer its state before each step since the mark, [L][mark_steps_ + 1].
  struct Checkpoint {
    LayerCache cache;
    int64_t step = 0;
    int32_t token = 0;
  };
  std::vector<Checkpoint> checkpoints_;
  std::vector<int> since_mark_;  // [L]: steps begun since the mark; -1: no mark
  int mark_steps_ = 0;           // checkpoints_ holds mark_steps_ + 1 per layer
  // Scratch, sized at construction.
  std::vector<float> biased_;                       // [E] z + bonus
  std::vector<float> masked_;                       // [E] group-limited scores
  std::vector<uint8_t> in_selected_;                // [E] membership mask, all 0 between uses
  std::vector<std::vector<int32_t>> pregate_rank_;  // [L]: pre-gate ranking, first max(W, K)
  std::vector<uint8_t> have_pregate_;               // [L]: part 1 ran for this layer this step
  std::vector<int32_t> topk_;                       // [K] bonused selection, rank order
  std::vector<int32_t> exact_;                      // [K] router's own top-K, rank order
  std::vector<int32_t> topj_;                       // [J] router top-J
  std::vector<uint8_t> in_topj_;                    // [E] top-J mask, all 0 between uses
  std::vector<uint8_t> in_exact_;                   // [E] exact top-K mask, all 0 between uses
  std::vector<uint8_t> bonus_set_;                  // [E] experts that get the bonus
  std::vector<float> cont_score_, cont_tiebreak_;   // [E] continuation over the bonused set
  std::vector<int32_t> cont_;                       // [K] bonused-set members, rank order
  std::vector<int32_t> topj_scratch_;               // [K] exact_ outside the bonus set
  std::vector<float> group_score_;                  // [n_group]
  std::vector<uint8_t> group_kept_;                 // [n_group]
  std::vector<float> weights_;                      // [K]
};

// Whether `path` runs as itself on this CPU (kAuto, kReference and kSse2 always do); top_k
// otherwise falls back to the next narrower path.
bool top_k_path_supported(TopKPath path);

// Top-k of `score` with the spec's tie rule (higher score, then higher `tiebreak`, then lower
// index); writes k indices in rank order to `out`. `tiebreak` may equal `score`.
void top_k(std::span<const float> score, std::span<const float> tiebreak, int k,
           std::span<int32_t> out, TopKPath path = TopKPath::kAuto);
// The scalar reference (insertion into a sorted buffer).
void top_k_reference(std::span<const float> score, std::span<const float> tiebreak, int k,
                     std::span<int32_t> out);

// The model's own selection (DeepSeek group limit included) of `selection` scores, ties broken
// by `unbonused`. `out` gets K indices in rank order. Scratch spans sized n_group.
void model_top_k(const RouterSpec& spec, std::span<const float> selection,
                 std::span<const float> unbonused, std::span<int32_t> out,
                 std::span<float> group_score, std::span<uint8_t> group_kept,
                 std::span<float> masked, TopKPath path = TopKPath::kAuto);

// Execution weights of `selected` by the model's own rule (see docs/policy-contract.md "Weights").
void execution_weights(const RouterSpec& spec, std::span<const float> weight_scores,
                       std::span<const int32_t> selected, std::span<float> out);

}  // namespace steermoe::policy
