#include "trace/replay.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "schedule/offload_step.hpp"
#include "trace/calibration_file.hpp"

namespace steermoe::trace {
namespace {

using nlohmann::json;

void append_ids(std::string& out, std::span<const int32_t> ids) {
  out.push_back('[');
  for (size_t i = 0; i < ids.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{}{}", i ? ", " : "", ids[i]);
  out.push_back(']');
}

void append_copies(std::string& out, std::span<const policy::Copy> copies) {
  out.push_back('[');
  for (size_t i = 0; i < copies.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{}[{}, {}]", i ? ", " : "", copies[i].expert,
                   copies[i].slot);
  out.push_back(']');
}

std::vector<int32_t> get_ids(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_array()) fail(where, key, "expected an array of expert ids");
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(where, key, "expected non-negative integer expert ids, found {}", json_excerpt(v));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

std::vector<policy::Copy> get_copies(const json& object, const char* key,
                                     const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_array())
    fail(where, key, "expected an array of [expert, slot] pairs");
  std::vector<policy::Copy> copies;
  for (const json& pair : *it) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
        !pair[1].is_number_integer() || pair[0].get<int64_t>() < 0 || pair[1].get<int64_t>() < 0 ||
        pair[0].get<int64_t>() > INT32_MAX || pair[1].get<int64_t>() > INT32_MAX)
      fail(where, key, "expected [expert, slot] pairs of non-negative integers, found {}",
           json_excerpt(pair));
    copies.push_back({static_cast<int32_t>(pair[0].get<int64_t>()),
                      static_cast<int32_t>(pair[1].get<int64_t>())});
  }
  return copies;
}

double per(uint64_t count, int64_t tokens) {
  return tokens > 0 ? static_cast<double>(count) / static_cast<double>(tokens) : 0.0;
}

}  // namespace

bool DecisionRecord::operator==(const DecisionRecord& o) const {
  auto same_copies = [](const std::vector<policy::Copy>& a, const std::vector<policy::Copy>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const policy::Copy& x, const policy::Copy& y) {
                        return x.expert == y.expert && x.slot == y.slot;
                      });
  };
  return t == o.t && layer == o.layer && selected == o.selected &&
         same_copies(prefetch, o.prefetch) && same_copies(demand, o.demand) &&
         evicted == o.evicted && resident == o.resident;
}

void append_decision_line(std::string& out, int64_t t, int layer, std::span<const int32_t> selected,
                          std::span<const policy::Copy> prefetch,
                          std::span<const policy::Copy> demand, std::span<const int32_t> evicted,
                          std::span<const int32_t> resident) {
  fmt::format_to(std::back_inserter(out), "{{\"t\": {}, \"l\": {}, \"S\": ", t, layer);
  append_ids(out, selected);
  out += ", \"prefetch\": ";
  append_copies(out, prefetch);
  out += ", \"demand\": ";
  append_copies(out, demand);
  out += ", \"evicted\": ";
  append_ids(out, evicted);
  out += ", \"resident\": ";
  append_ids(out, resident);
  out += "}\n";
}

std::string decision_line(const DecisionRecord& r) {
  std::string out;
  append_decision_line(out, r.t, r.layer, r.selected, r.prefetch, r.demand, r.evicted, r.resident);
  return out;
}

DecisionRecord parse_decision_line(std::string_view line, const std::string& where) {
  json object;
  try {
    check_json_depth(line, where);
    object = parse_json_or_discarded(line);
  } catch (const json::exception&) {
    object = json(json::value_t::discarded);
  }
  if (object.is_discarded() || !object.is_object())
    fail(where, "line", "expected one JSON object per line");
  DecisionRecord r;
  const auto t = object.find("t");
  const auto l = object.find("l");
  if (t == object.end() || !t->is_number_integer() || t->get<int64_t>() < 0)
    fail(where, "t", "expected a non-negative integer step index");
  if (l == object.end() || !l->is_number_integer() || l->get<int64_t>() < 0 ||
      l->get<int64_t>() > INT32_MAX)
    fail(where, "l", "expected a non-negative integer layer index");
  r.t = t->get<int64_t>();
  r.layer = static_cast<int>(l->get<int64_t>());
  r.selected = get_ids(object, "S", where);
  r.prefetch = get_copies(object, "prefetch", where);
  r.demand = get_copies(object, "demand", where);
  r.evicted = get_ids(object, "evicted", where);
  r.resident = get_ids(object, "resident", where);
  return r;
}

LayerTotals ReplaySummary::totals() const {
  LayerTotals sum;
  for (const LayerTotals& layer : per_layer) {
    sum.demand += layer.demand;
    sum.prefetch += layer.prefetch;
    sum.evicted += layer.evicted;
    sum.replaced += layer.replaced;
  }
  return sum;
}

double ReplaySummary::replaced_fraction() const {
  const double picks = static_cast<double>(tokens) * layers * top_k;
  return picks > 0 ? static_cast<double>(totals().replaced) / picks : 0.0;
}

json ReplaySummary::to_json() const {
  const LayerTotals sum = totals();
  json out;
  out["summary"] = true;
  out["policy"] = policy;
  out["policy_arg"] = policy_arg;
  out["cache"] = cache_slots;
  out["loop"] = loop;
  out["loop_reason"] = loop_reason;
  out["trace"] = trace;
  out["calibration"] = calibration;
  out["tokens"] = tokens;
  out["sequences"] = sequences;
  out["layers"] = layers;
  out["top_k"] = top_k;
  out["layer_steps"] = tokens * layers;
  out["per_token"] = {{"demand", per(sum.demand, tokens)},
                      {"prefetch", per(sum.prefetch, tokens)},
                      {"copies", per(sum.demand + sum.prefetch, tokens)},
                      {"evicted", per(sum.evicted, tokens)}};
  out["totals"] = {{"demand", sum.demand},
                   {"prefetch", sum.prefetch},
                   {"copies", sum.demand + sum.prefetch},
                   {"evicted", sum.evicted},
                   {"replaced", sum.replaced}};
  out["replaced_fraction"] = replaced_fraction();
  json layers_json = json::array();
  for (size_t l = 0; l < per_layer.size(); ++l) {
    const LayerTotals& layer = per_layer[l];
    const double picks = static_cast<double>(tokens) * top_k;
    layers_json.push_back(
        {{"layer", l},
         {"demand", per(layer.demand, tokens)},
         {"prefetch", per(layer.prefetch, tokens)},
         {"copies", per(layer.demand + layer.prefetch, tokens)},
         {"replaced_fraction", picks > 0 ? static_cast<double>(layer.replaced) / picks : 0.0}});
  }
  out["per_layer"] = layers_json;
  return out;
}

LoopClass classify_loop(const TraceMeta& meta, const policy::PolicyConfig& config,
                        const policy::RouterSpec& spec, int cache_slots,
                        const std::string& calibration) {
  // Compare with the model's window filled in, so "psr:lambda=0.3" equals "...,w=8" on OLMoE.
  auto resolved = [&](policy::PolicyConfig c) {
    c.window = c.effective_window(spec);
    return c.to_string();
  };
  policy::PolicyConfig recorded;  // absent "policy" = exact routing
  bool parsed = true;
  if (meta.policy) {
    try {
      recorded = policy::parse_policy(*meta.policy);
    } catch (const Error&) {
      parsed = false;
    }
  }
  const std::string recorded_name =
      meta.policy ? *meta.policy : std::string("exact routing (meta.json has no \"policy\")");
  if (parsed && recorded.kind == policy::PolicyKind::kExact &&
      config.kind == policy::PolicyKind::kExact) {
    return {"closed", "trace recorded under " + recorded_name +
                          "; exact routing's decisions do not depend on the cache"};
  }
  if (!parsed || config.physical || resolved(recorded) != resolved(config)) {
    return {"open", "trace recorded under " + recorded_name};
  }
  if (meta.cache_slots && *meta.cache_slots != cache_slots) {
    return {"open", fmt::format("trace recorded with cache {}", *meta.cache_slots)};
  }
  // The policy reads the calibration (warm set, score ranges, prior): another one makes other
  // decisions from the first token on.
  if (meta.calibration && !calibration.empty() && *meta.calibration != calibration) {
    return {"open", fmt::format("trace recorded with another calibration ({}; this one {})",
                                *meta.calibration, calibration)};
  }
  if (!meta.calibration) {
    return {"closed",
            "trace recorded under the replayed policy (its meta.json does not name its "
            "calibration: closed only if it was this one)"};
  }
  return {"closed", "trace recorded under the replayed policy and calibration"};
}

ReplaySummary replay_trace(const Trace& trace, const policy::Calibration& calibration,
                           const ReplayOptions& options) {
  const TraceMeta& meta = trace.meta();
  // As sim and calibrate: a trace without steps has nothing to replay (its figures would be
  // zeros, its loop "closed").
  if (trace.steps() == 0)
    fail(trace.dir().string(), "steps",
         "expected a trace with at least one routed step, found none");
  const policy::RouterSpec spec = meta.router_spec();
  const std::string& calib_name = options.calibration_source;
  policy::check_calibration_shape(calibration, spec, calib_name, "layers/experts/top_k",
                                  "the trace's");
  const policy::PolicyConfig config = policy::parse_policy(options.policy);
  policy::validate(config, spec, options.cache_slots);

  ReplaySummary summary;
  summary.policy_arg = options.policy;
  summary.policy = config.to_string();
  summary.cache_slots = options.cache_slots;
  summary.trace = trace.dir().string();
  summary.calibration = calib_name;
  summary.tokens = trace.steps();
  summary.sequences = static_cast<int64_t>(trace.sequence_starts().size());
  summary.layers = meta.layers;
  summary.top_k = meta.top_k;
  summary.per_layer.assign(static_cast<size_t>(meta.layers), LayerTotals{});
  const LoopClass loop =
      classify_loop(meta, config, spec, options.cache_slots, calibration_fingerprint(calibration));
  summary.loop = loop.loop;
  summary.loop_reason = loop.reason;

  schedule::OffloadStep step(spec, config, calibration, {.cache_slots = options.cache_slots});
  // The trace's rows are the driver; each decision is counted and written as it is made.
  struct TraceDriver final : schedule::LayerDriver {
    const Trace& trace;
    const ReplayOptions& options;
    const schedule::OffloadStep& step;
    ReplaySummary& summary;
    bool sigmoid_weights;
    int64_t t = 0;
    std::string buffer;
    TraceDriver(const Trace& tr, const ReplayOptions& o, const schedule::OffloadStep& s,
                ReplaySummary& sum, bool sigmoid)
        : trace(tr), options(o), step(s), summary(sum), sigmoid_weights(sigmoid) {}
    schedule::LayerScores scores(int l) override {
      // Softmax routers take their weights from z itself; sigmoid ones need the unbiased scores.
      return {
          .z = trace.scores(t, l),
          .weight_scores = sigmoid_weights ? trace.weights_scores(t, l) : std::span<const float>{},
          .pregate_next =
              l + 1 < summary.layers ? trace.pregate(t, l + 1) : std::span<const float>{}};
    }
    void routed(int l, int /*position*/, const policy::Decision& d,
                std::span<const float> /*pregate*/) override {
      LayerTotals& totals = summary.per_layer[static_cast<size_t>(l)];
      totals.demand += d.demand.size();
      totals.prefetch += d.prefetch.size();
      totals.evicted += d.evicted.size();
      totals.replaced += static_cast<uint64_t>(d.replaced);
      // The line shows layer l's cache after its own step: part 1 of layer l+1 (run in the same
      // H(l)) changes only layer l+1.
      const policy::LayerCache& cache = step.router().cache(l);
      if (options.on_decision) options.on_decision(t, l, d, cache);
      if (options.decisions != nullptr) {
        buffer.clear();
        append_decision_line(buffer, t, l, d.selected, d.prefetch, d.demand, d.evicted,
                             cache.resident_sorted());
        options.decisions->write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      }
    }
  } driver(trace, options, step, summary, spec.mode == policy::ScoreMode::kSigmoid);
  const auto& starts = trace.sequence_starts();
  size_t next_start = 0;
  for (int64_t t = 0; t < trace.steps(); ++t) {
    if (next_start < starts.size() && starts[next_start] == t) {
      step.begin_request();
      ++next_start;
    }
    driver.t = t;
    step.run_token(trace.token(t), driver);
  }
  if (options.decisions != nullptr) {
    *options.decisions << dump_json(summary.to_json()) << "\n";
    if (!*options.decisions) fail("decisions", "write", "could not write the decisions output");
  }
  return summary;
}

std::string summary_table(std::span<const ReplaySummary> summaries) {
  std::string out = fmt::format("{:<36} {:>5} {:>6} {:>9} {:>9} {:>9} {:>9}\n", "policy", "cache",
                                "loop", "demand/t", "prefet/t", "copies/t", "replaced");
  for (const ReplaySummary& s : summaries) {
    const LayerTotals sum = s.totals();
    out +=
        fmt::format("{:<36} {:>5} {:>6} {:>9.3f} {:>9.3f} {:>9.3f} {:>8.2f}%\n", s.policy,
                    s.cache_slots, s.loop, per(sum.demand, s.tokens), per(sum.prefetch, s.tokens),
                    per(sum.demand + sum.prefetch, s.tokens), 100.0 * s.replaced_fraction());
  }
  return out;
}

}  // namespace steermoe::trace
