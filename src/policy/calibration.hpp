// Calibration data the policies need: warm sets, token priors and bonus ranges, computed from a
// trace recorded under exact routing on held-out text. Pure data and arithmetic; the file format
// lives in src/trace/calibration_file.*.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/config.hpp"

namespace steermoe::policy {

// One non-zero token-prior entry: expert e was in the exact top-K at this layer in `count` of
// the token's held-out occurrences.
struct PriorEntry {
  uint16_t expert = 0;
  uint32_t count = 0;
};

// prior_l(x)_e = float(count) / float(occurrences(x)) in float32 (exact definition, so every
// implementation gets the same bits). Stored sparsely: per layer, per token, only non-zero
// experts, sorted by expert id. Tokens never seen have no entries (prior 0).
struct TokenPrior {
  int layers = 0;
  int vocab = 0;                      // token ids are < vocab
  std::vector<uint32_t> occurrences;  // [vocab]: held-out occurrences of each token as input
  std::vector<uint64_t> row_begin;    // [layers * vocab + 1]: CSR offsets into entries
  std::vector<PriorEntry> entries;    // all non-zero entries

  std::span<const PriorEntry> row(int layer, int32_t token) const;
  bool empty() const { return entries.empty(); }
};

struct Calibration {
  int layers = 0;
  int experts = 0;
  int top_k = 0;
  // [L][E]: held-out count of each expert in the exact top-K (every step, all sequences).
  std::vector<std::vector<uint64_t>> expert_counts;
  // [L][E]: experts ordered by count, highest first, ties to the lower index. The warm set of a
  // cache with C slots is the first C (slot i holds the i-th).
  std::vector<std::vector<int32_t>> expert_order;
  // [L]: mean over held-out steps of (max z - min z) under exact routing.
  std::vector<float> score_range;
  TokenPrior prior;
  uint64_t steps = 0;  // held-out steps counted

  // Checks internal consistency (sizes, orderings, CSR bounds); throws steermoe::Error with
  // `source` named in the message.
  void check(const char* source) const;
};

// Throws steermoe::Error "<source>: <field>: expected a calibration of L=.. E=.. K=.. (<against>
// MoE layers, experts, top-k), found L=.. E=.. K=.." unless `calibration` has the router's shape.
// The one shape check of every user (the resolved offload configuration, the simulator, replay, the
// CLI).
void check_calibration_shape(const Calibration& calibration, const RouterSpec& spec,
                             const std::string& source, const std::string& field,
                             const std::string& against);

// Calibration with no information: warm order = expert index, ranges 0, no token prior. Enough
// for exact routing (lambda = 0) and for an all-resident cache (C = E).
Calibration uninformed_calibration(const RouterSpec& spec);

// Accumulates calibration from exact-routing steps (one call per step and layer).
class Calibrator {
 public:
  Calibrator(const RouterSpec& spec, int vocab);
  // z: the layer's selection scores for this step. Uses the model's own exact top-K.
  void add(int layer, int32_t token, std::span<const float> z);
  // Marks the end of a step (one token through all layers).
  void end_step() { ++steps_; }
  Calibration finish() const;

 private:
  RouterSpec spec_;
  int vocab_;
  uint64_t steps_ = 0;
  std::vector<std::vector<uint64_t>> counts_;                        // [L][E]
  std::vector<double> range_sum_;                                    // [L]
  std::vector<uint64_t> range_n_;                                    // [L]
  std::vector<uint32_t> occurrences_;                                // [vocab], counted at layer 0
  std::vector<std::unordered_map<uint64_t, uint32_t>> pair_counts_;  // [L]: token*E+e -> count
  std::vector<int32_t> topk_buf_;
  std::vector<float> group_score_;
  std::vector<uint8_t> group_kept_;
  std::vector<float> masked_;
};

}  // namespace steermoe::policy
