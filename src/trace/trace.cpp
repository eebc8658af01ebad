#include "trace/trace.hpp"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/input_file.hpp"
#include "common/json_input.hpp"

namespace steermoe::trace {
namespace {

using nlohmann::json;

constexpr int kMaxLayers = 4096;
constexpr int kMaxExperts = 65535;  // expert ids are u16 in calibration files

int64_t get_int(const json& object, const char* key, const std::string& where, int64_t lo,
                int64_t hi, std::optional<int64_t> fallback) {
  const auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    fail(where, key, "expected an integer field '{}' (missing)", key);
  }
  if (!it->is_number_integer())
    fail(where, key, "expected an integer in [{}, {}], found {}", lo, hi, json_excerpt(*it));
  const int64_t value = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                            ? INT64_MAX
                            : it->get<int64_t>();
  if (value < lo || value > hi)
    fail(where, key, "expected an integer in [{}, {}], found {}", lo, hi, value);
  return value;
}

std::string get_string(const json& object, const char* key, const std::string& where,
                       std::optional<std::string> fallback) {
  const auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    fail(where, key, "expected a string field '{}' (missing)", key);
  }
  if (!it->is_string()) fail(where, key, "expected a string, found {}", json_excerpt(*it));
  return it->get<std::string>();
}

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {"layers",
                                             "experts",
                                             "top_k",
                                             "router",
                                             "moe_layer_ids",
                                             "model",
                                             "tokens_file",
                                             "n_group",
                                             "topk_group",
                                             "norm_topk_prob",
                                             "routed_scaling_factor",
                                             "window",
                                             "vocab",
                                             "policy",
                                             "cache_slots",
                                             "expert_bytes",
                                             "calibration"};
  return keys;
}

std::string shape_text(std::span<const uint64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

policy::RouterSpec TraceMeta::router_spec() const {
  policy::RouterSpec spec;
  spec.experts = experts;
  spec.top_k = top_k;
  spec.layers = layers;
  spec.mode = router == "sigmoid" ? policy::ScoreMode::kSigmoid : policy::ScoreMode::kSoftmax;
  spec.n_group = n_group;
  spec.topk_group = topk_group;
  spec.norm_topk_prob = norm_topk_prob;
  spec.routed_scaling_factor = routed_scaling_factor;
  spec.default_window = window > 0 ? window : std::min(8, experts);
  return spec;
}

json TraceMeta::to_json() const {
  json out = extra.is_object() ? extra : json::object();
  out["layers"] = layers;
  out["experts"] = experts;
  out["top_k"] = top_k;
  out["router"] = router;
  out["moe_layer_ids"] = moe_layer_ids;
  out["model"] = model;
  out["tokens_file"] = tokens_file;
  out["n_group"] = n_group;
  out["topk_group"] = topk_group;
  out["norm_topk_prob"] = norm_topk_prob;
  out["routed_scaling_factor"] = routed_scaling_factor;
  if (window > 0) out["window"] = window;
  if (vocab > 0) out["vocab"] = vocab;
  if (policy) out["policy"] = *policy;
  if (cache_slots) out["cache_slots"] = *cache_slots;
  if (calibration) out["calibration"] = *calibration;
  if (expert_bytes) out["expert_bytes"] = *expert_bytes;
  return out;
}

TraceMeta trace_meta_from_json(const json& object, const std::string& where) {
  if (!object.is_object())
    fail(where, "meta", "expected a JSON object, found {}", object.type_name());
  TraceMeta meta;
  meta.layers = static_cast<int>(get_int(object, "layers", where, 1, kMaxLayers, std::nullopt));
  meta.experts = static_cast<int>(get_int(object, "experts", where, 1, kMaxExperts, std::nullopt));
  meta.top_k = static_cast<int>(get_int(object, "top_k", where, 1, meta.experts, std::nullopt));
  meta.router = get_string(object, "router", where, std::nullopt);
  if (meta.router != "softmax" && meta.router != "sigmoid")
    fail(where, "router", "expected \"softmax\" or \"sigmoid\", found \"{}\"", meta.router);
  if (const auto it = object.find("moe_layer_ids"); it != object.end()) {
    if (!it->is_array() || it->size() != static_cast<size_t>(meta.layers))
      fail(where, "moe_layer_ids",
           "expected an array of {} layer indices (one per MoE layer), found {}", meta.layers,
           json_excerpt(*it));
    for (const json& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 1'000'000)
        fail(where, "moe_layer_ids", "expected non-negative integer layer indices, found {}",
             json_excerpt(id));
      meta.moe_layer_ids.push_back(static_cast<int>(id.get<int64_t>()));
    }
  } else {
    for (int l = 0; l < meta.layers; ++l) meta.moe_layer_ids.push_back(l);
  }
  meta.model = get_string(object, "model", where, std::string());
  meta.tokens_file = get_string(object, "tokens_file", where, std::string("tokens.npy"));
  if (meta.tokens_file.empty() || meta.tokens_file.find('/') != std::string::npos ||
      meta.tokens_file == "." || meta.tokens_file == "..")
    fail(where, "tokens_file", "expected a file name inside the trace folder, found \"{}\"",
         meta.tokens_file);
  meta.n_group = static_cast<int>(get_int(object, "n_group", where, 1, meta.experts, 1));
  if (meta.experts % meta.n_group != 0)
    fail(where, "n_group", "expected a divisor of experts = {}, found {}", meta.experts,
         meta.n_group);
  meta.topk_group =
      static_cast<int>(get_int(object, "topk_group", where, 1, meta.n_group, meta.n_group));
  if (const auto it = object.find("norm_topk_prob"); it != object.end()) {
    if (!it->is_boolean())
      fail(where, "norm_topk_prob", "expected true or false, found {}", json_excerpt(*it));
    meta.norm_topk_prob = it->get<bool>();
  }
  if (const auto it = object.find("routed_scaling_factor"); it != object.end()) {
    // Checked as float32, the type it is used in (1e300 is finite as a double, not as a float).
    if (!it->is_number() || !std::isfinite(it->get<float>()) || !(it->get<float>() > 0.0f))
      fail(where, "routed_scaling_factor", "expected a positive finite number, found {}",
           json_excerpt(*it));
    meta.routed_scaling_factor = it->get<float>();
  }
  meta.window = static_cast<int>(get_int(object, "window", where, 1, meta.experts, 0));
  meta.vocab = static_cast<int>(get_int(object, "vocab", where, 0, INT32_MAX, 0));
  if (const auto it = object.find("policy"); it != object.end() && !it->is_null()) {
    if (!it->is_string())
      fail(where, "policy", "expected a policy string, found {}", json_excerpt(*it));
    meta.policy = it->get<std::string>();
  }
  if (const auto it = object.find("calibration"); it != object.end() && !it->is_null()) {
    if (!it->is_string())
      fail(where, "calibration", "expected a calibration fingerprint string, found {}",
           json_excerpt(*it));
    meta.calibration = it->get<std::string>();
  }
  if (object.contains("cache_slots"))
    meta.cache_slots =
        static_cast<int>(get_int(object, "cache_slots", where, 1, meta.experts, std::nullopt));
  if (object.contains("expert_bytes"))
    meta.expert_bytes =
        static_cast<uint64_t>(get_int(object, "expert_bytes", where, 0, INT64_MAX, std::nullopt));
  for (const auto& [key, value] : object.items())
    if (!known_keys().contains(key)) meta.extra[key] = value;
  return meta;
}

TraceMeta parse_trace_meta(std::string_view text, const std::string& where) {
  check_json_depth(text, where);  // before anything can recurse over a hostile nesting
  json object = parse_json_or_discarded(text);
  if (object.is_discarded()) {
    // Parse again with exceptions for the position of the error.
    try {
      object = parse_json_or_throw(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
      fail(where, "json", "expected valid JSON ({})", e.what());
    }
  }
  return trace_meta_from_json(object, where);
}

void validate_scores(const TraceMeta& meta, const NpyArray& array, uint64_t steps,
                     bool check_finite) {
  const uint64_t expected[3] = {steps, static_cast<uint64_t>(meta.layers),
                                static_cast<uint64_t>(meta.experts)};
  if (array.shape().size() != 3 || array.shape()[1] != expected[1] ||
      array.shape()[2] != expected[2] || array.shape()[0] != steps)
    fail(array.where(), "shape",
         "expected [T, L, E] = {} (T from tokens, L and E from meta.json), found {}",
         shape_text(expected), shape_text(array.shape()));
  if (!check_finite) return;
  const std::span<const float> values = array.values<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      const size_t e = i % static_cast<size_t>(meta.experts);
      const size_t l = i / static_cast<size_t>(meta.experts) % static_cast<size_t>(meta.layers);
      const size_t t = i / static_cast<size_t>(meta.experts) / static_cast<size_t>(meta.layers);
      fail(array.where(), fmt::format("(t, l, e) = ({}, {}, {})", t, l, e),
           "expected a finite score, found {}", values[i]);
    }
  }
}

std::vector<int32_t> load_tokens(const TraceMeta& meta, const NpyArray& array) {
  if (array.shape().size() != 1)
    fail(array.where(), "shape", "expected [T] (one token per step), found {}",
         shape_text(array.shape()));
  std::vector<int32_t> tokens(static_cast<size_t>(array.size()));
  auto check = [&](size_t t, int64_t value) {
    if (value < 0 || value > INT32_MAX || (meta.vocab > 0 && value >= meta.vocab))
      fail(array.where(), fmt::format("token {}", t), "expected a token id in [0, {}), found {}",
           meta.vocab > 0 ? int64_t{meta.vocab} : int64_t{INT32_MAX}, value);
    tokens[t] = static_cast<int32_t>(value);
  };
  if (array.dtype() == DType::kI32) {
    const auto values = array.values<int32_t>();
    for (size_t t = 0; t < values.size(); ++t) check(t, values[t]);
  } else {
    const auto values = array.values<int64_t>();
    for (size_t t = 0; t < values.size(); ++t) check(t, values[t]);
  }
  return tokens;
}

std::vector<int64_t> load_sequence_starts(const NpyArray& array, uint64_t steps) {
  if (array.shape().size() != 1)
    fail(array.where(), "shape", "expected [S] (one start step per sequence), found {}",
         shape_text(array.shape()));
  std::vector<int64_t> starts;
  auto add = [&](size_t i, int64_t value) {
    if (i == 0 && value != 0)
      fail(array.where(), "sequence 0", "expected the first sequence to start at step 0, found {}",
           value);
    if (i > 0 && value <= starts.back())
      fail(array.where(), fmt::format("sequence {}", i),
           "expected strictly increasing start steps, found {} after {}", value, starts.back());
    if (value < 0 || static_cast<uint64_t>(value) >= steps)
      fail(array.where(), fmt::format("sequence {}", i),
           "expected a start step in [0, {}), found {}", steps, value);
    starts.push_back(value);
  };
  if (array.dtype() == DType::kI64) {
    const auto values = array.values<int64_t>();
    for (size_t i = 0; i < values.size(); ++i) add(i, values[i]);
  } else {
    const auto values = array.values<int32_t>();
    for (size_t i = 0; i < values.size(); ++i) add(i, values[i]);
  }
  return starts;
}

Trace Trace::open(const std::filesystem::path& dir, const TraceOpenOptions& options) {
  Trace trace;
  trace.dir_ = dir;
  const std::filesystem::path meta_path = dir / "meta.json";
  {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      fail(dir.string(), "trace",
           "expected a trace folder (meta.json, tokens.npy, scores.npy, pregate.npy)");
    if (!std::filesystem::exists(meta_path, ec))
      fail(meta_path.string(), "open", "expected the trace's meta.json (cannot read it)");
    trace.meta_ = parse_trace_meta(
        read_input_file(meta_path, "the trace's meta.json", kMaxJsonFileBytes), meta_path.string());
  }
  const TraceMeta& meta = trace.meta_;
  const NpyArray tokens = NpyArray::open(dir / meta.tokens_file, {DType::kI32, DType::kI64});
  trace.tokens_ = load_tokens(meta, tokens);
  const uint64_t steps = trace.tokens_.size();
  trace.scores_ = NpyArray::open(dir / "scores.npy", {DType::kF32});
  validate_scores(meta, trace.scores_, steps, options.check_finite);
  trace.pregate_ = NpyArray::open(dir / "pregate.npy", {DType::kF32});
  validate_scores(meta, trace.pregate_, steps, options.check_finite);
  if (std::filesystem::exists(dir / "weights_scores.npy")) {
    trace.weights_scores_ = NpyArray::open(dir / "weights_scores.npy", {DType::kF32});
    validate_scores(meta, trace.weights_scores_, steps, options.check_finite);
    trace.has_weights_scores_ = true;
  }
  if (std::filesystem::exists(dir / "sequences.npy")) {
    trace.sequence_starts_ = load_sequence_starts(
        NpyArray::open(dir / "sequences.npy", {DType::kI64, DType::kI32}), steps);
  } else if (steps > 0) {
    trace.sequence_starts_ = {0};
  }
  return trace;
}

TraceWriter::TraceWriter(const std::filesystem::path& dir, TraceMeta meta, bool with_weights_scores)
    : staged_(dir, "meta.json"),
      dir_(staged_.staging()),
      meta_(std::move(meta)),
      with_weights_(with_weights_scores),
      tokens_(dir_ / meta_.tokens_file, DType::kI32, {}),
      scores_(dir_ / "scores.npy", DType::kF32,
              {static_cast<uint64_t>(meta_.layers), static_cast<uint64_t>(meta_.experts)}),
      pregate_(dir_ / "pregate.npy", DType::kF32,
               {static_cast<uint64_t>(meta_.layers), static_cast<uint64_t>(meta_.experts)}) {
  // A stale weights_scores.npy from an earlier trace in the same folder would be read back as
  // part of this one.
  if (!with_weights_) staged_.remove_at_commit("weights_scores.npy");
  if (meta_.moe_layer_ids.empty())
    for (int l = 0; l < meta_.layers; ++l) meta_.moe_layer_ids.push_back(l);
  // Fail now, not after hours of recording, if the meta would not read back.
  trace_meta_from_json(meta_.to_json(), (dir / "meta.json").string());
  if (with_weights_)
    weights_.emplace(dir_ / "weights_scores.npy", DType::kF32,
                     std::vector<uint64_t>{static_cast<uint64_t>(meta_.layers),
                                           static_cast<uint64_t>(meta_.experts)});
}

TraceWriter::~TraceWriter() = default;  // without close(): the staging folder is removed

void TraceWriter::begin_sequence() {
  if (sequence_starts_.empty() || sequence_starts_.back() != steps_)
    sequence_starts_.push_back(steps_);
}

void TraceWriter::append_step(int32_t token, std::span<const float> scores,
                              std::span<const float> pregate,
                              std::span<const float> weights_scores) {
  SM_ASSERT(!closed_);
  const size_t row = static_cast<size_t>(meta_.layers) * static_cast<size_t>(meta_.experts);
  SM_ASSERT(scores.size() == row && pregate.size() == row);
  SM_ASSERT(token >= 0);
  SM_ASSERT(with_weights_ ? weights_scores.size() == row : weights_scores.empty());
  // Trace::open refuses a non-finite score: refuse it here, where the step is known, rather than
  // write a trace nothing can read.
  for (const std::span<const float> rows : {scores, pregate, weights_scores}) {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!std::isfinite(rows[i]))
        fail(staged_.final_path().string(), "scores",
             "expected finite scores, found {} at step {}, layer {}, expert {}", rows[i], steps_,
             i / static_cast<size_t>(meta_.experts), i % static_cast<size_t>(meta_.experts));
    }
  }
  // Trace::open refuses a token past meta.json's vocabulary: refused here as well.
  if (meta_.vocab > 0 && token >= meta_.vocab)
    fail(staged_.final_path().string(), "tokens",
         "expected a token id below meta.json's vocab of {}, found {} at step {}", meta_.vocab,
         token, steps_);
  if (sequence_starts_.empty()) sequence_starts_.push_back(0);
  tokens_.append(std::span<const int32_t>(&token, 1));
  scores_.append(scores);
  pregate_.append(pregate);
  if (with_weights_) weights_->append(weights_scores);
  ++steps_;
}

void TraceWriter::close() {
  if (closed_) return;
  closed_ = true;
  tokens_.close();
  scores_.close();
  pregate_.close();
  if (weights_) weights_->close();
  // A trailing begin_sequence() with no step after it starts nothing.
  while (!sequence_starts_.empty() && sequence_starts_.back() >= steps_)
    sequence_starts_.pop_back();
  const uint64_t count = sequence_starts_.size();
  write_npy<int64_t>(dir_ / "sequences.npy", sequence_starts_,
                     std::span<const uint64_t>(&count, 1));
  const std::filesystem::path meta_path = dir_ / "meta.json";
  std::ofstream out(meta_path, std::ios::binary | std::ios::trunc);
  out << dump_json(meta_.to_json(), 2) << "\n";
  out.close();
  if (!out) fail(meta_path.string(), "write", "could not write meta.json");
  staged_.commit();
}

}  // namespace steermoe::trace
