// Speculative decoding on the command line: --draft MODEL, --draft-k K, --spec-select RULE,
// --pool P, --union-slots U, shared by the commands that generate. The drafter runs with every
// weight resident and exact routing (a dense drafter routes nothing).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "cli/engine_options.hpp"
#include "engine/engine.hpp"
#include "engine/speculative.hpp"
#include "model/weights.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

struct SpecOptions {
  std::string draft;  // drafter model; empty = no speculative decoding
  int draft_k = 4;    // drafts per verification
  // --spec-select: rollback | policy | exact | block | block:conf. Default rollback: speculative
  // decoding then changes latency, never the greedy text (as users of llama.cpp and vLLM expect).
  std::string select = "rollback";
  int pool = 0;                    // P per layer (0: the cache size)
  int union_slots = 0;             // U per layer (0: the cache size)
  bool no_block_prefetch = false;  // --no-block-prefetch
};

void add_speculative_options(CLI::App* cmd, SpecOptions& options);

// The offload request with the verification rule of `options` (unchanged without --draft).
void apply_speculative(const SpecOptions& options, schedule::OffloadRequest& request);

// The drafter: its model and a resident, exact-routing engine with `threads` and `context`.
// With --draft synthetic:A[,MS] (a drafter without a model: engine::SyntheticDraft) only
// `synthetic` is set.
struct Drafter {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<engine::Engine> engine;
  std::optional<engine::SyntheticDraft> synthetic;
  bool any() const { return engine != nullptr || synthetic.has_value(); }
};
// `teacher_forced`: the command follows a text (bench without --generate, kl), where a synthetic
// drafter may stand in for a model; elsewhere synthetic:... is an error naming --draft. A drafter
// model must tokenize as `target` does (same size, same bytes for every id, same BOS / EOS):
// drafts are token ids, so a drafter with another vocabulary drafts nonsense and is refused.
Drafter load_drafter(const SpecOptions& options, int threads, int context,
                     const tokenizer::Tokenizer& target, bool teacher_forced = false);

// Empty when `drafter` tokenizes as `target`; else what differs (the first differing id).
std::string tokenizer_mismatch(const tokenizer::Tokenizer& drafter,
                               const tokenizer::Tokenizer& target);

// "synthetic:A[,MS]" -> its draft (nullopt for any other text); Error naming --draft for a
// malformed one.
std::optional<engine::SyntheticDraft> parse_synthetic_draft(const std::string& text);

// "tau 2.41 tokens/verification; accepted by depth 0.71 0.52 ...; block copies 3.1/token;
// draft 1.2 ms/token, verify 4.0 ms/token".
std::string speculative_report(const engine::SpecStats& stats);

}  // namespace steermoe::cli
