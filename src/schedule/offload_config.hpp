// The one resolved offload configuration: the user's words (policy string, cache size or
// residency, link, max_inflight, calibration) turned once into a typed, validated value that
// the CLI, the server and the Python module hand to the engine or the step. Every default and
// every cross-check of these options lives in resolve_offload() and nowhere else.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "link/link_spec.hpp"
#include "policy/block_selection.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "schedule/scheduler.hpp"

namespace steermoe::schedule {

// What the user asked for, as given.
struct OffloadRequest {
  std::string policy = "exact:evict=lru";  // routing policy string
  int cache = 0;                           // slots per MoE layer; 0 = from residency, else all
  double residency = 0.0;                  // fraction of each layer's experts cached; 0 = not given
  std::string link = "resident";           // --link value
  int max_inflight = 2;                    // prefetch copies in flight at a layer boundary
  std::string pacing = "fifo";             // --prefetch-pacing: fifo | defer | demand
  std::string issue = "boundary";          // --prefetch-issue: boundary | early
  std::string moe_wait = "all";            // --moe-wait: all | ready
  // Speculative decoding's verification (--spec-select): "" (through the policy) | rollback |
  // exact | block | block:conf, with the block rules' pool P and union slots U per layer (0: the
  // cache size C).
  std::string spec_select;
  int pool = 0;
  int union_slots = 0;
  int draft_k = 0;             // drafts per verification: sizes the block rules' slots on a link
  bool block_prefetch = true;  // BlockParams::prefetch_next (links only; latency, not output)
  bool verify = false;         // disk link: checksum every copied expert
  // Loaded by the caller (or null: none found). Shared: engines and steps keep it alive.
  std::shared_ptr<const policy::Calibration> calibration;
  std::string calibration_source;  // its file, for messages
  // Where a missing calibration should have come from, for the message when a policy needs one
  // (empty: "none found beside" the model, the CLI's default lookup).
  std::string calibration_hint;
};

// The model facts the options are resolved against.
struct ModelFacts {
  policy::RouterSpec spec;  // layers = MoE layers (0 for a dense model)
  std::string name;         // the model's path, for messages
};

// Resolved and validated.
struct OffloadConfig {
  // Out of line: GCC 12 at -O3 reports the inlined default member initializers of this struct
  // inside designated-initializer temporaries as "maybe uninitialized" (a false positive).
  OffloadConfig();
  policy::PolicyConfig policy;  // parsed once
  int cache_slots = 0;          // C per MoE layer (K <= C <= E); 0 for a dense model
  link::LinkSpec link;          // parsed; resident for a dense model
  int max_inflight = 2;         // 1..1024
  PrefetchPacing pacing = PrefetchPacing::kFifo;   // physical only: routing never sees it
  PrefetchIssue issue = PrefetchIssue::kBoundary;  // physical only
  MoeWait moe_wait = MoeWait::kAll;                // physical only
  std::optional<policy::BlockParams> block;        // verification rules (speculative decoding)
  // With `block`, the most experts a verification block of draft_k + 1 positions can execute per
  // layer (capped at E): exact (draft_k + 1) x top-k, block P + U, block:conf P + U + draft_k
  // (its rescued top-1 experts may lie outside the set). A link holds that many slots.
  int block_slots = 0;
  int draft_k = 0;
  bool rollback = false;  // verification through the policy, rejected positions taken back
  bool verify = false;
  // Never null: the given calibration, or an uninformed one (exact LRU and C = E need nothing).
  std::shared_ptr<const policy::Calibration> calibration;
  std::string calibration_source;  // "" when uninformed

  std::string policy_text() const { return policy.to_string(); }  // canonical
  // Slots per MoE layer a link holds: C, or with verification blocks block_slots when that is
  // more (the policy's C are the first of them).
  int physical_slots() const { return block ? std::max(cache_slots, block_slots) : cache_slots; }
  // The request that resolves to this configuration (to resolve a variant of it: another
  // policy or cache size with the same link and calibration).
  OffloadRequest request() const;
};

// Resolves `request` for a model. C = --cache, else round(residency * E) clamped to [K, E], else
// E. A dense model (spec.layers == 0) routes nothing: the policy is still parsed (a typo stays an
// error) but the cache, the link and the calibration are no-ops. Throws steermoe::Error naming
// the option for: both --cache and --residency, a policy that does not fit the model or the
// cache, a calibration of another shape, a cache-aware policy below C = E without a
// calibration, a bad --link, max_inflight outside 1..1024, an unknown --prefetch-pacing or
// --prefetch-issue or --moe-wait.
OffloadConfig resolve_offload(const OffloadRequest& request, const ModelFacts& model);

// "fifo" | "defer" | "demand" (Error naming --prefetch-pacing otherwise), and back.
PrefetchPacing parse_pacing(const std::string& text);
const char* pacing_name(PrefetchPacing pacing);

// "boundary" | "early" (Error naming --prefetch-issue otherwise), and back.
PrefetchIssue parse_issue(const std::string& text);
const char* issue_name(PrefetchIssue issue);

// "all" | "ready" (Error naming --moe-wait otherwise), and back.
MoeWait parse_moe_wait(const std::string& text);
const char* moe_wait_name(MoeWait wait);

}  // namespace steermoe::schedule
