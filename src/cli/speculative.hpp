// Speculative decoding on the command line: --draft MODEL, --draft-k K, --spec-select RULE,
// --pool P, --union-slots U, shared by the commands that generate. The drafter runs with every
// weight resident and exact routing (a dense drafter routes nothing).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/engine_options.hpp"
#include "engine/engine.hpp"
#include "engine/speculative.hpp"
#include "model/weights.hpp"

namespace steermoe::cli {

struct SpecOptions {
  std::string draft;             // drafter model; empty = no speculative decoding
  int draft_k = 4;               // drafts per verification
  std::string select = "policy";  // --spec-select: policy | exact | block | block:conf
  int pool = 0;                  // P per layer (0: the cache size)
  int union_slots = 0;           // U per layer (0: the cache size)
};

void add_speculative_options(CLI::App* cmd, SpecOptions& options);

// The offload request with the verification rule of `options` (unchanged without --draft).
void apply_speculative(const SpecOptions& options, schedule::OffloadRequest& request);

// The drafter: its model and a resident, exact-routing engine with `threads` and `context`.
struct Drafter {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<engine::Engine> engine;
};
Drafter load_drafter(const SpecOptions& options, int threads, int context);

// "tau 2.41 tokens/verification; accepted by depth 0.71 0.52 ...; block copies 3.1/token;
// draft 1.2 ms/token, verify 4.0 ms/token".
std::string speculative_report(const engine::SpecStats& stats);

}  // namespace steermoe::cli
