// steermoe._core: the routing step, the policy library and trace I/O of steermoe for Python
// (pybind11), with numpy arrays. The same C++ code the engine, replay and the simulator run
// (schedule::OffloadStep over steermoe_policy, and steermoe_trace), not a port. The Python-side API
// is documented in python/README.md.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/memory_limit.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "policy/router.hpp"
#include "schedule/offload_config.hpp"
#include "schedule/offload_step.hpp"
#include "trace/calibration_file.hpp"
#include "trace/replay.hpp"
#include "trace/trace.hpp"

namespace py = pybind11;
using namespace steermoe;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::array_t<int32_t> copies_array(std::span<const policy::Copy> copies) {
  py::array_t<int32_t> out({static_cast<py::ssize_t>(copies.size()), py::ssize_t{2}});
  auto m = out.mutable_unchecked<2>();
  for (size_t i = 0; i < copies.size(); ++i) {
    m(static_cast<py::ssize_t>(i), 0) = copies[i].expert;
    m(static_cast<py::ssize_t>(i), 1) = copies[i].slot;
  }
  return out;
}

template <typename T>
py::array_t<T> vector_array(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

struct LayerStats {
  uint64_t demand = 0, prefetch = 0, evicted = 0, replaced = 0, selections = 0;
};

// One request row's logical caches: schedule::OffloadStep (logical only), the one owner of the
// call order the engine, `replay` and the simulator run. Two ways to drive it:
//   run_token(token, z[L, E], pregate[L, E])   token-major (decode), the step owns the layer loop
//   route_layer(layer, tokens[n], z[n, E], pregate[n, E])
//                                              one layer of the layer-major schedule, for callers
//                                              whose framework owns the layer loop (the HF
//                                              harness: transformers calls each MoE block for
//                                              every position before the next block)
// Either way the decisions are those of the engine (each layer's state depends only on that
// layer's history).
class Step {
 public:
  Step(const policy::RouterSpec& spec, const std::string& policy_text,
       std::shared_ptr<const policy::Calibration> calib, int cache_slots)
      : config_(schedule::resolve_offload({.policy = policy_text,
                                           .cache = cache_slots,
                                           .calibration = std::move(calib),
                                           .calibration_source = "calibration"},
                                          {.spec = spec, .name = "the RouterSpec"})),
        step_(spec, config_.policy, *config_.calibration, {.cache_slots = config_.cache_slots}),
        spec_(spec) {
    stats_.assign(static_cast<size_t>(spec_.layers), LayerStats{});
  }

  void reset() { step_.begin_request(); }

  // Token-major: rows [L, E]; pregate row l = router l on MoE layer l-1's input (row 0 unused:
  // the trace format's convention). Returns the selections int32 [L, K].
  py::array_t<int32_t> run_token(int32_t token, const FloatArray& z,
                                 const std::optional<FloatArray>& pregate,
                                 const std::optional<FloatArray>& weight_scores) {
    if (token < 0) throw Error(fmt::format("run_token: token: expected >= 0, found {}", token));
    const auto L = static_cast<py::ssize_t>(spec_.layers);
    const auto K = static_cast<py::ssize_t>(spec_.top_k);
    RowsDriver driver(
        *this, rows_span(z, L, "z"),
        pregate ? rows_span(*pregate, L, "pregate") : std::span<const float>{},
        weight_scores ? rows_span(*weight_scores, L, "weight_scores") : std::span<const float>{});
    // Without them part 1 would silently insert nothing: another policy than the one named.
    if (!pregate && step_.prefetches() && spec_.layers > 1)
      throw Error(
          "run_token: pregate: expected the pre-gate scores [L, E]: the policy prefetches (part 1 "
          "reads the next layer's router on this layer's input)");
    py::array_t<int32_t> out({L, K});
    driver.out = out.mutable_data();
    step_.run_token(token, driver);
    ++tokens_;
    return out;
  }

  // One layer of the layer-major schedule for n positions: tokens [n], rows [n, E]; pregate:
  // router `layer` on MoE layer layer-1's input (None: no part 1; not for layer 0). Returns
  // (selected int32 [n, K], weights float32 [n, K] or None).
  py::tuple route_layer(int layer, const py::array_t<int64_t, py::array::forcecast>& tokens,
                        const FloatArray& z, const std::optional<FloatArray>& pregate,
                        const std::optional<FloatArray>& weight_scores) {
    check_layer(layer);
    if (pregate && layer < 1)
      throw Error(
          "route_layer: pregate: expected layer >= 1 (part 1 is for the layer after the "
          "one whose input it was computed on)");
    if (!pregate && layer >= 1 && step_.prefetches())
      throw Error(
          "route_layer: pregate: expected the pre-gate scores [n, E] for layer >= 1: the policy "
          "prefetches (part 1 reads this layer's router on the previous layer's input)");
    if (tokens.ndim() != 1) throw Error("route_layer: tokens: expected a 1-D array");
    const auto n = static_cast<py::ssize_t>(tokens.shape(0));
    const std::span<const float> zs = rows_span(z, n, "z");
    const std::span<const float> ps =
        pregate ? rows_span(*pregate, n, "pregate") : std::span<const float>{};
    const std::span<const float> ws =
        weight_scores ? rows_span(*weight_scores, n, "weight_scores") : std::span<const float>{};
    const auto E = static_cast<size_t>(spec_.experts);
    const auto K = static_cast<py::ssize_t>(spec_.top_k);
    py::array_t<int32_t> selected({n, K});
    py::array_t<float> weights({n, K});
    bool have_weights = true;
    for (py::ssize_t t = 0; t < n; ++t) {
      const int64_t token = tokens.at(t);
      if (token < 0 || token > INT32_MAX)
        throw Error(fmt::format("route_layer: tokens: expected ids in [0, 2^31), found {}", token));
      const size_t off = static_cast<size_t>(t) * E;
      const policy::Decision& d = step_.route_layer_major(
          layer, static_cast<int32_t>(token), ps.empty() ? ps : ps.subspan(off, E),
          zs.subspan(off, E), ws.empty() ? ws : ws.subspan(off, E));
      count(layer, d);
      std::copy(d.selected.begin(), d.selected.end(), selected.mutable_data(t, 0));
      have_weights = have_weights && d.has_weights;
      if (d.has_weights) std::copy(d.weights.begin(), d.weights.end(), weights.mutable_data(t, 0));
    }
    if (layer == 0) tokens_ += n;
    return py::make_tuple(selected, have_weights ? py::object(weights) : py::object(py::none()));
  }

  py::dict decision(int layer) const {
    check_layer(layer);
    const policy::Decision& d = step_.router().decision(layer);
    py::dict out;
    out["layer"] = d.layer;
    out["step"] = d.step;
    out["selected"] = vector_array(d.selected);
    out["selected_slot"] = vector_array(d.selected_slot);
    out["weights"] = d.has_weights ? py::object(vector_array(d.weights)) : py::object(py::none());
    out["exact"] = vector_array(d.exact);
    out["prefetch"] = copies_array(d.prefetch);
    out["demand"] = copies_array(d.demand);
    out["evicted"] = vector_array(d.evicted);
    out["replaced"] = d.replaced;
    return out;
  }
  py::array_t<int32_t> resident(int layer) const {
    check_layer(layer);
    return vector_array(step_.router().cache(layer).resident_sorted());
  }
  py::dict stats() const {
    py::dict out;
    py::list layers;
    LayerStats total;
    for (const LayerStats& s : stats_) {
      py::dict l;
      l["demand"] = s.demand;
      l["prefetch"] = s.prefetch;
      l["evicted"] = s.evicted;
      l["replaced"] = s.replaced;
      l["selections"] = s.selections;
      layers.append(l);
      total.demand += s.demand;
      total.prefetch += s.prefetch;
      total.evicted += s.evicted;
      total.replaced += s.replaced;
      total.selections += s.selections;
    }
    out["tokens"] = tokens_;
    out["layers"] = layers;
    out["demand"] = total.demand;
    out["prefetch"] = total.prefetch;
    out["copies"] = total.demand + total.prefetch;
    out["evicted"] = total.evicted;
    out["replaced"] = total.replaced;
    out["replaced_fraction"] = total.selections
                                   ? static_cast<double>(total.replaced) /
                                         (static_cast<double>(total.selections) * spec_.top_k)
                                   : 0.0;
    return out;
  }
  void reset_stats() {
    stats_.assign(stats_.size(), LayerStats{});
    tokens_ = 0;
  }
  void set_compute_weights(bool on) { step_.set_compute_weights(on); }
  std::string policy() const { return config_.policy_text(); }
  int cache_slots() const { return config_.cache_slots; }
  bool prefetches() const { return step_.prefetches(); }
  const policy::RouterSpec& spec() const { return spec_; }

 private:
  // The step's driver over [L, E] rows of one token.
  struct RowsDriver final : schedule::LayerDriver {
    Step& self;
    std::span<const float> z, pregate, weight_scores;
    int32_t* out = nullptr;
    RowsDriver(Step& s, std::span<const float> z_rows, std::span<const float> pregate_rows,
               std::span<const float> ws_rows)
        : self(s), z(z_rows), pregate(pregate_rows), weight_scores(ws_rows) {}
    std::span<const float> row(std::span<const float> rows, int layer) const {
      const auto E = static_cast<size_t>(self.spec_.experts);
      return rows.empty() ? rows : rows.subspan(static_cast<size_t>(layer) * E, E);
    }
    schedule::LayerScores scores(int l) override {
      return {.z = row(z, l),
              .weight_scores = row(weight_scores, l),
              .pregate_next =
                  l + 1 < self.spec_.layers ? row(pregate, l + 1) : std::span<const float>{}};
    }
    void routed(int l, int /*position*/, const policy::Decision& d,
                std::span<const float> /*pregate*/) override {
      self.count(l, d);
      std::copy(d.selected.begin(), d.selected.end(),
                out + static_cast<size_t>(l) * static_cast<size_t>(self.spec_.top_k));
    }
  };

  void count(int layer, const policy::Decision& d) {
    LayerStats& s = stats_[static_cast<size_t>(layer)];
    s.demand += d.demand.size();
    s.prefetch += d.prefetch.size();
    s.evicted += d.evicted.size();
    s.replaced += static_cast<uint64_t>(d.replaced);
    ++s.selections;
  }
  // A float32 array of `rows` x E values (any shape with that many, e.g. [rows, E]).
  std::span<const float> rows_span(const FloatArray& a, py::ssize_t rows, const char* what) const {
    const py::ssize_t want = rows * spec_.experts;
    if (a.size() != want || (a.ndim() == 2 && a.shape(1) != spec_.experts) || a.ndim() > 2)
      throw Error(fmt::format("{}: shape: expected {} x {} float32 scores, found ndim {} size {}",
                              what, rows, spec_.experts, a.ndim(), a.size()));
    // A NaN or inf would rank arbitrarily and weigh NaN: refused, as the CLI refuses it in traces.
    const float* data = a.data();
    for (py::ssize_t i = 0; i < want; ++i) {
      if (!std::isfinite(data[i]))
        throw Error(fmt::format("{}: value: expected finite scores, found {} at row {}, expert {}",
                                what, data[i], i / spec_.experts, i % spec_.experts));
    }
    return {data, static_cast<size_t>(want)};
  }
  void check_layer(int layer) const {
    if (layer < 0 || layer >= spec_.layers)
      throw Error(fmt::format("layer: expected 0 <= layer < {}, found {}", spec_.layers, layer));
  }

  schedule::OffloadConfig config_;
  schedule::OffloadStep step_;
  policy::RouterSpec spec_;
  std::vector<LayerStats> stats_;
  int64_t tokens_ = 0;
};

// Every decision of `policy` over a trace, from `steermoe replay`'s own code (trace::replay_trace):
// a list of (t, layer, selected, prefetch copies, demand copies, resident).
py::list replay_decisions(const std::shared_ptr<trace::Trace>& trace,
                          const policy::Calibration& calibration, const std::string& policy,
                          int cache_slots) {
  py::list out;
  trace::ReplayOptions options{
      .policy = policy, .cache_slots = cache_slots, .calibration_source = "calibration"};
  options.on_decision = [&out](int64_t t, int layer, const policy::Decision& d,
                               const policy::LayerCache& cache) {
    out.append(py::make_tuple(t, layer, vector_array(d.selected), copies_array(d.prefetch),
                              copies_array(d.demand), vector_array(cache.resident_sorted())));
  };
  trace::replay_trace(*trace, calibration, options);
  return out;
}

// Read access to a trace folder; arrays are zero-copy views of the memory-mapped files.
struct PyTrace {
  std::shared_ptr<trace::Trace> t;
};

struct PyTraceWriter {
  std::unique_ptr<trace::TraceWriter> w;
  int layers = 0, experts = 0;
  bool with_ws = false, closed = false;
  trace::TraceWriter& check_open() {
    if (closed) throw Error("TraceWriter: closed: expected an open writer");
    return *w;
  }
};

py::array scores_view(const PyTrace& self, py::handle owner, int which) {
  const trace::Trace& t = *self.t;
  const auto T = static_cast<py::ssize_t>(t.steps());
  const auto L = static_cast<py::ssize_t>(t.layers()), E = static_cast<py::ssize_t>(t.experts());
  if (which == 2 && !t.has_weights_scores()) return py::none();
  if (T == 0) return py::array_t<float>({T, L, E});
  const float* data = which == 0   ? t.scores(0, 0).data()
                      : which == 1 ? t.pregate(0, 0).data()
                                   : t.weights_scores(0, 0).data();
  py::array_t<float> a({T, L, E}, {L * E * 4, E * 4, py::ssize_t{4}}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "steermoe policy library and trace I/O (the engine's C++ code)";
  m.attr("pybind11_version") = py::make_tuple(PYBIND11_VERSION_MAJOR, PYBIND11_VERSION_MINOR);
  py::register_exception<Error>(m, "Error", PyExc_ValueError);

  py::enum_<policy::ScoreMode>(m, "ScoreMode")
      .value("softmax", policy::ScoreMode::kSoftmax)
      .value("sigmoid", policy::ScoreMode::kSigmoid);

  py::class_<policy::RouterSpec>(m, "RouterSpec")
      .def(py::init([](int experts, int top_k, int layers, const std::string& mode, int n_group,
                       int topk_group, bool norm_topk_prob, float routed_scaling_factor,
                       int default_window) {
             if (experts < 1 || top_k < 1 || top_k > experts || layers < 0 || n_group < 1 ||
                 topk_group < 1 || topk_group > n_group || experts % n_group != 0)
               throw Error(fmt::format(
                   "RouterSpec: expected experts >= 1, 1 <= top_k <= experts, layers >= 0, "
                   "n_group >= 1 dividing experts and 1 <= topk_group <= n_group; found experts "
                   "{}, top_k {}, layers {}, n_group {}, topk_group {}",
                   experts, top_k, layers, n_group, topk_group));
             // Everything sized by the spec (calibrations, steps) is layers x experts: checked
             // against this machine's memory here, not left to the OOM killer.
             if (experts > 65535)
               throw Error(
                   fmt::format("RouterSpec: experts: expected at most 65535 (expert ids are u16 in "
                               "calibration files), found {}",
                               experts));
             check_allocation("RouterSpec", "layers x experts",
                              saturating_mul(saturating_mul(static_cast<uint64_t>(layers),
                                                            static_cast<uint64_t>(experts)),
                                             64),
                              fmt::format("{} layers x {} experts", layers, experts),
                              "expected a model-sized spec");
             policy::RouterSpec s;
             s.experts = experts;
             s.top_k = top_k;
             s.layers = layers;
             if (mode != "softmax" && mode != "sigmoid")
               throw Error(
                   fmt::format("RouterSpec: mode: expected softmax or sigmoid, found {}", mode));
             s.mode = mode == "sigmoid" ? policy::ScoreMode::kSigmoid : policy::ScoreMode::kSoftmax;
             s.n_group = n_group;
             s.topk_group = topk_group;
             s.norm_topk_prob = norm_topk_prob;
             s.routed_scaling_factor = routed_scaling_factor;
             s.default_window = default_window;
             return s;
           }),
           py::arg("experts"), py::arg("top_k"), py::arg("layers"), py::arg("mode") = "softmax",
           py::arg("n_group") = 1, py::arg("topk_group") = 1, py::arg("norm_topk_prob") = false,
           py::arg("routed_scaling_factor") = 1.0f, py::arg("default_window") = 8)
      .def_readonly("experts", &policy::RouterSpec::experts)
      .def_readonly("top_k", &policy::RouterSpec::top_k)
      .def_readonly("layers", &policy::RouterSpec::layers)
      .def_property_readonly("mode",
                             [](const policy::RouterSpec& s) {
                               return s.mode == policy::ScoreMode::kSigmoid ? "sigmoid" : "softmax";
                             })
      .def_readonly("n_group", &policy::RouterSpec::n_group)
      .def_readonly("topk_group", &policy::RouterSpec::topk_group)
      .def_readonly("norm_topk_prob", &policy::RouterSpec::norm_topk_prob)
      .def_readonly("routed_scaling_factor", &policy::RouterSpec::routed_scaling_factor)
      .def_readonly("default_window", &policy::RouterSpec::default_window);

  m.def(
      "canonical_policy",
      [](const std::string& text) { return policy::parse_policy(text).to_string(); },
      py::arg("policy"),
      "Parses a policy string (errors name the key) and returns its canonical form");
  m.def(
      "parse_policy",
      [](const std::string& text) {
        const policy::PolicyConfig c = policy::parse_policy(text);
        py::dict d;
        const char* kinds[] = {"exact", "cacheprior", "psr", "spec"};
        d["kind"] = kinds[static_cast<int>(c.kind)];
        // lambda is a float32 (the policy's numerics); Python's float of it would print
        // 0.30000001192092896. The shortest decimal that reads back as the same float32 (the one
        // the canonical string shows) is what the user wrote.
        d["lambda"] = std::stod(fmt::format("{}", c.lambda));
        d["n"] = c.prefetch_budget;
        d["w"] = c.window;
        d["evict"] = c.evict == policy::Evict::kA ? "a" : "lru";
        d["j"] = c.protect_top_j;
        d["range"] = c.range == policy::RangeMode::kRunning ? "running" : "fixed";
        d["gate"] = c.gate == policy::PrefetchGate::kBonus ? "bonus" : "window";
        d["physical"] = c.physical;
        d["canonical"] = c.to_string();
        return d;
      },
      py::arg("policy"));

  py::class_<policy::Calibration, std::shared_ptr<policy::Calibration>>(m, "Calibration")
      .def_readonly("layers", &policy::Calibration::layers)
      .def_readonly("experts", &policy::Calibration::experts)
      .def_readonly("top_k", &policy::Calibration::top_k)
      .def_readonly("steps", &policy::Calibration::steps)
      .def_property_readonly("expert_order",
                             [](const policy::Calibration& c) {
                               py::list out;
                               for (const auto& o : c.expert_order) out.append(vector_array(o));
                               return out;
                             })
      .def_property_readonly(
          "score_range", [](const policy::Calibration& c) { return vector_array(c.score_range); });
  m.def(
      "load_calibration",
      [](const std::string& path) {
        return std::make_shared<policy::Calibration>(trace::read_calibration(path));
      },
      py::arg("path"), "Reads a .smcal file");
  m.def(
      "uninformed_calibration",
      [](const policy::RouterSpec& spec) {
        return std::make_shared<policy::Calibration>(policy::uninformed_calibration(spec));
      },
      py::arg("spec"));

  py::class_<Step>(m, "Step")
      .def(py::init<const policy::RouterSpec&, const std::string&,
                    std::shared_ptr<const policy::Calibration>, int>(),
           py::arg("spec"), py::arg("policy"), py::arg("calibration"), py::arg("cache_slots") = 0)
      .def("reset", &Step::reset, "New request: every layer back to its warm set")
      .def("run_token", &Step::run_token, py::arg("token"), py::arg("z"),
           py::arg("pregate") = py::none(), py::arg("weight_scores") = py::none(),
           "One token through every MoE layer (the engine's decode order); rows [L, E], pregate "
           "row l = router l on layer l-1's MoE input. Returns the selections int32 [L, K]")
      .def("route_layer", &Step::route_layer, py::arg("layer"), py::arg("tokens"), py::arg("z"),
           py::arg("pregate") = py::none(), py::arg("weight_scores") = py::none(),
           "One MoE layer for n positions (the layer-major schedule): tokens [n], rows [n, E]. "
           "Returns (selected int32 [n, K], weights float32 [n, K] or None)")
      .def("decision", &Step::decision, py::arg("layer"))
      .def("resident", &Step::resident, py::arg("layer"))
      .def("stats", &Step::stats)
      .def("reset_stats", &Step::reset_stats)
      .def("set_compute_weights", &Step::set_compute_weights, py::arg("on"))
      .def_property_readonly("policy", &Step::policy)
      .def_property_readonly("cache_slots", &Step::cache_slots)
      .def_property_readonly("prefetches", &Step::prefetches,
                             "True if the policy runs part 1 (needs pre-gate scores)")
      .def_property_readonly("spec", &Step::spec);
  m.def(
      "replay_decisions",
      [](const PyTrace& trace, const policy::Calibration& calibration, const std::string& policy,
         int cache_slots) { return replay_decisions(trace.t, calibration, policy, cache_slots); },
      py::arg("trace"), py::arg("calibration"), py::arg("policy"), py::arg("cache_slots"),
      "Every decision of `steermoe replay` as (t, layer, selected, prefetch, demand, resident)");

  py::class_<PyTrace>(m, "Trace")
      .def_static(
          "open",
          [](const std::string& dir) {
            return PyTrace{std::make_shared<trace::Trace>(trace::Trace::open(dir))};
          },
          py::arg("dir"))
      .def_property_readonly(
          "meta_json", [](const PyTrace& self) { return dump_json(self.t->meta().to_json()); })
      .def_property_readonly("steps", [](const PyTrace& self) { return self.t->steps(); })
      .def_property_readonly("layers", [](const PyTrace& self) { return self.t->layers(); })
      .def_property_readonly("experts", [](const PyTrace& self) { return self.t->experts(); })
      .def_property_readonly("tokens",
                             [](const PyTrace& self) {
                               const auto tk = self.t->tokens();
                               return vector_array(std::vector<int32_t>(tk.begin(), tk.end()));
                             })
      .def_property_readonly(
          "sequence_starts",
          [](const PyTrace& self) { return vector_array(self.t->sequence_starts()); })
      .def_property_readonly(
          "scores",
          [](py::object self) { return scores_view(self.cast<const PyTrace&>(), self, 0); })
      .def_property_readonly(
          "pregate",
          [](py::object self) { return scores_view(self.cast<const PyTrace&>(), self, 1); })
      .def_property_readonly(
          "weights_scores",
          [](py::object self) { return scores_view(self.cast<const PyTrace&>(), self, 2); })
      .def("router_spec", [](const PyTrace& self) { return self.t->meta().router_spec(); });

  py::class_<PyTraceWriter>(m, "TraceWriter")
      .def(py::init([](const std::string& dir, const std::string& meta_json, bool with_ws) {
             const nlohmann::json j = parse_json_or_discarded(meta_json);
             if (j.is_discarded()) throw Error("TraceWriter: meta: expected valid JSON");
             trace::TraceMeta meta = trace::trace_meta_from_json(j, "meta");
             auto w = std::make_unique<PyTraceWriter>();
             w->layers = meta.layers;
             w->experts = meta.experts;
             w->with_ws = with_ws;
             w->w = std::make_unique<trace::TraceWriter>(dir, std::move(meta), with_ws);
             return w;
           }),
           py::arg("dir"), py::arg("meta_json"), py::arg("with_weights_scores") = false)
      .def("begin_sequence", [](PyTraceWriter& w) { w.check_open().begin_sequence(); })
      .def(
          "append_step",
          [](PyTraceWriter& w, int32_t token, const FloatArray& scores, const FloatArray& pregate,
             const std::optional<FloatArray>& ws) {
            const auto row = static_cast<py::ssize_t>(w.layers) * w.experts;
            if (scores.size() != row || pregate.size() != row || (ws && ws->size() != row))
              throw Error(
                  fmt::format("append_step: shape: expected scores and pregate{} of {} x "
                              "{} float32 values",
                              w.with_ws ? " and weight_scores" : "", w.layers, w.experts));
            if (w.with_ws != ws.has_value())
              throw Error(w.with_ws
                              ? "append_step: weight_scores: expected (the writer records them)"
                              : "append_step: weight_scores: expected none (the writer "
                                "was made without with_weights_scores)");
            if (token < 0) throw Error("append_step: token: expected >= 0");
            std::span<const float> wspan;
            if (ws) wspan = {ws->data(), static_cast<size_t>(ws->size())};
            w.check_open().append_step(token, {scores.data(), static_cast<size_t>(row)},
                                       {pregate.data(), static_cast<size_t>(row)}, wspan);
          },
          py::arg("token"), py::arg("scores"), py::arg("pregate"),
          py::arg("weight_scores") = py::none())
      .def_property_readonly("steps", [](const PyTraceWriter& w) { return w.w->steps(); })
      .def("close", [](PyTraceWriter& w) {
        w.check_open().close();
        w.closed = true;
      });
}
