// Configuration of a routing policy and of the model's router, plus the policy-string parser.
// The grammar and every default are documented in docs/commands.md ("Policy strings").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace steermoe::policy {

enum class ScoreMode : uint8_t {
  kSoftmax,  // z = router logits; execution weights = softmax over all E logits
  kSigmoid,  // z = sigmoid(logits) + e_score_correction_bias; weights from sigmoid(logits)
};

// The routing facts of a model, resolved once when the model (or trace) is loaded.
struct RouterSpec {
  int experts = 0;  // E: routed experts per MoE layer
  int top_k = 0;    // K: experts executed per token
  int layers = 0;   // L: MoE layers (layer index 0 = "layer 1" of the spec)
  ScoreMode mode = ScoreMode::kSoftmax;
  int n_group = 1;                     // DeepSeek group-limited selection: groups of E/n_group
  int topk_group = 1;                  // groups kept (n_group == topk_group disables the limit)
  bool norm_topk_prob = false;         // renormalise execution weights over S
  float routed_scaling_factor = 1.0f;  // multiplies the execution weights (DeepSeek-V3)
  int default_window = 8;              // W when the policy string does not set w (4 for DeepSeek)
};

enum class PolicyKind : uint8_t { kExact, kCachePrior, kPsr, kSpec };
enum class Evict : uint8_t { kA, kLru };
enum class RangeMode : uint8_t { kFixed, kRunning };
// Which pre-gate candidates part 1 may insert. kWindow: the first W of the pre-gate ranking g
// (the paper's PSR). kBonus: the members of the *predicted selection*, the bonused top-K of the
// pre-gate scores against R as it stands, so part 1 copies only experts that part 2 would have
// demand-loaded had the prediction been right (docs/policy-contract.md, "Prefetch gate").
enum class PrefetchGate : uint8_t { kWindow, kBonus };

struct PolicyConfig {
  PolicyKind kind = PolicyKind::kExact;
  float lambda = 0.0f;        // bonus, in units of the layer's score range
  int prefetch_budget = 0;    // n: insertions per (layer, token) in part 1
  int window = 0;             // W: pre-gate candidates examined; 0 = model default
  Evict evict = Evict::kLru;  // eviction priority
  int protect_top_j = 0;      // J: router top-J get the bonus as if resident
  RangeMode range = RangeMode::kFixed;
  PrefetchGate gate = PrefetchGate::kWindow;
  bool physical = false;  // demonstration mode: bonus on issued copies (timing-dependent)

  // Canonical form, accepted back by parse_policy (e.g. "psr:lambda=0.3,n=1,w=8,evict=a").
  std::string to_string() const;
  // The window actually used for a model (the model default is capped at E).
  int effective_window(const RouterSpec& spec) const {
    return window > 0 ? window
                      : (spec.default_window < spec.experts ? spec.default_window : spec.experts);
  }
};

// Parses "name[:key=value[,key=value]...]"; throws steermoe::Error naming the key and the
// expected values for unknown names, unknown keys, duplicates and out-of-range values.
PolicyConfig parse_policy(std::string_view text);

// Checks the policy against a model and cache size: K <= C <= E, w <= E, j <= K. (n may exceed
// w: part 1 never inserts more than the window holds, so n = 8 means "unbounded".)
// Throws steermoe::Error with a clear message. A spec without MoE layers accepts anything.
void validate(const PolicyConfig& config, const RouterSpec& spec, int cache_slots);

}  // namespace steermoe::policy
