// Router traces (docs/trace-format.md; summary in README.md here): a folder
// with meta.json, tokens.npy [T], scores.npy [T,L,E], pregate.npy [T,L,E], optional
// weights_scores.npy [T,L,E] and optional sequences.npy [S]. Trace opens and validates one
// (arrays memory-mapped); TraceWriter records one step by step, as the engine produces it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/config.hpp"
#include "common/output_file.hpp"
#include "trace/npy.hpp"

namespace steermoe::trace {

struct TraceMeta {
  int layers = 0;                  // L: MoE layers recorded
  int experts = 0;                 // E: routed experts per layer
  int top_k = 0;                   // K
  std::string router = "softmax";  // "softmax" or "sigmoid" (see policy::ScoreMode)
  std::vector<int> moe_layer_ids;  // model layer index of each MoE layer [L]
  std::string model;               // model name or path
  std::string tokens_file = "tokens.npy";
  // Optional routing facts (defaults: no group limit, no renormalisation, scale 1, W = 8).
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  int window = 0;                     // default pre-gate window W of the model; 0 = min(8, E)
  int vocab = 0;                      // tokenizer vocabulary size; 0 = unknown
  std::optional<std::string> policy;  // policy the trace was recorded under; absent = exact
  std::optional<int> cache_slots;     // cache size it was recorded with (closed loop needs it)
  std::optional<std::string> calibration;  // calibration_fingerprint() it was recorded with
  std::optional<uint64_t> expert_bytes;
  nlohmann::json extra = nlohmann::json::object();  // every other field, kept as is

  policy::RouterSpec router_spec() const;
  nlohmann::json to_json() const;
};

// Parses and validates meta.json text; `where` names the file in messages.
TraceMeta parse_trace_meta(std::string_view text, const std::string& where);
TraceMeta trace_meta_from_json(const nlohmann::json& json, const std::string& where);

struct TraceOpenOptions {
  // Scan every score for NaN/inf (one pass over the data). Off only for tools that do their own.
  bool check_finite = true;
};

class Trace {
 public:
  // Opens the trace folder `dir`; throws steermoe::Error naming the file, field and expectation.
  static Trace open(const std::filesystem::path& dir, const TraceOpenOptions& options = {});

  const TraceMeta& meta() const { return meta_; }
  const std::filesystem::path& dir() const { return dir_; }
  int64_t steps() const { return static_cast<int64_t>(tokens_.size()); }
  int layers() const { return meta_.layers; }
  int experts() const { return meta_.experts; }
  int32_t token(int64_t t) const { return tokens_[static_cast<size_t>(t)]; }
  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const float> scores(int64_t t, int layer) const { return row(scores_, t, layer); }
  std::span<const float> pregate(int64_t t, int layer) const { return row(pregate_, t, layer); }
  bool has_weights_scores() const { return has_weights_scores_; }
  // Empty when the trace has no weights_scores.npy.
  std::span<const float> weights_scores(int64_t t, int layer) const {
    return has_weights_scores() ? row(weights_scores_, t, layer) : std::span<const float>{};
  }
  // Step index where each sequence starts: {0} when sequences.npy is absent; empty for T = 0.
  const std::vector<int64_t>& sequence_starts() const { return sequence_starts_; }

 private:
  std::span<const float> row(const NpyArray& array, int64_t t, int layer) const {
    const size_t e = static_cast<size_t>(meta_.experts);
    return array.values<float>().subspan((static_cast<size_t>(t) * meta_.layers + layer) * e, e);
  }

  std::filesystem::path dir_;
  TraceMeta meta_;
  std::vector<int32_t> tokens_;
  NpyArray scores_, pregate_, weights_scores_;
  bool has_weights_scores_ = false;
  std::vector<int64_t> sequence_starts_;
};

// Validates already-loaded trace arrays against the meta (shapes, finiteness, token range,
// sequence starts); used by Trace::open and by the fuzzer. Each array's where() names its file.
void validate_scores(const TraceMeta& meta, const NpyArray& array, uint64_t steps,
                     bool check_finite);
std::vector<int32_t> load_tokens(const TraceMeta& meta, const NpyArray& array);
std::vector<int64_t> load_sequence_starts(const NpyArray& array, uint64_t steps);

// Records a trace step by step. The .npy headers get the final shapes and meta.json is written
// at close(); a trace that was never closed is not readable (meta.json is missing).
class TraceWriter {
 public:
  // Writes into a staging folder next to `dir`; close() moves the files into `dir` (creating it),
  // meta.json last. Destroyed without close() (an error, Ctrl-C) the staging folder is removed
  // and `dir` is left as it was: no partial trace ever looks complete.
  // `with_weights_scores`: also record weights_scores.npy.
  TraceWriter(const std::filesystem::path& dir, TraceMeta meta, bool with_weights_scores);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Marks the next step as the start of a new sequence (request). The first step always starts
  // one.
  void begin_sequence();
  // Appends one step: the input token and the [L*E] rows of every layer (layer-major).
  // `weights_scores` must be given iff the writer records them.
  void append_step(int32_t token, std::span<const float> scores, std::span<const float> pregate,
                   std::span<const float> weights_scores = {});
  int64_t steps() const { return steps_; }
  // Finishes the files and writes meta.json (and sequences.npy when there is more than one
  // sequence). Throws on I/O errors.
  void close();

 private:
  StagedDirectory staged_;
  std::filesystem::path dir_;  // the staging folder
  TraceMeta meta_;
  bool with_weights_;
  int64_t steps_ = 0;
  bool closed_ = false;
  std::vector<int64_t> sequence_starts_;
  NpyStreamWriter tokens_, scores_, pregate_;
  std::optional<NpyStreamWriter> weights_;
};

}  // namespace steermoe::trace
