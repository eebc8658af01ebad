// steermoe._core: the policy library and trace I/O of steermoe for Python (pybind11), with numpy
// arrays. The same C++ code the engine, replay and the simulator run (steermoe_policy and
// steermoe_trace), not a port. The Python-side API is documented in python/README.md.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "policy/calibration.hpp"
#include "policy/config.hpp"
#include "policy/router.hpp"
#include "trace/calibration_file.hpp"
#include "trace/replay.hpp"
#include "trace/trace.hpp"

namespace py = pybind11;
using namespace steermoe;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::span<const float> row_span(const FloatArray& a, int expected, const char* what) {
  if (a.ndim() != 1 || a.shape(0) != expected)
    throw Error(
        fmt::format("{}: shape: expected a 1-D array of {} float32 scores, found ndim {} "
                    "size {}",
                    what, expected, a.ndim(), a.size()));
  return {a.data(), static_cast<size_t>(expected)};
}

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

// One request row's logical caches. per_layer = false: one policy::RequestRouter driven
// token-major (begin_token, then select(l) and prefetch(l + 1) per layer) as `steermoe replay`.
// per_layer = true: one RequestRouter per MoE layer, as the engine's prefill, so that a whole
// layer can be routed for every token before the next layer runs (what a transformers forward
// pass needs); each layer's router only ever sees its own layer, and the decisions are the same.
class Router {
 public:
  Router(const policy::RouterSpec& spec, const std::string& policy_text,
         std::shared_ptr<const policy::Calibration> calib, int cache_slots, bool per_layer)
      : spec_(spec),
        config_(policy::parse_policy(policy_text)),
        calib_(std::move(calib)),
        slots_(cache_slots > 0 ? cache_slots : spec.experts),
        per_layer_(per_layer) {
    policy::validate(config_, spec_, slots_);
    if (calib_->layers != spec_.layers || calib_->experts != spec_.experts ||
        calib_->top_k != spec_.top_k)
      fail("calibration", "shape",
           "expected {} MoE layers x {} experts, top-{} (the router spec's), found {} x {}, top-{}",
           spec_.layers, spec_.experts, spec_.top_k, calib_->layers, calib_->experts,
           calib_->top_k);
    const int n = per_layer ? spec_.layers : 1;
    for (int i = 0; i < n; ++i)
      routers_.push_back(std::make_unique<policy::RequestRouter>(spec_, config_, *calib_, slots_));
    stats_.assign(static_cast<size_t>(spec_.layers), LayerStats{});
  }

  void reset() {
    for (auto& r : routers_) r->reset();
  }
  void begin_token(int32_t token, int layer) {
    if (token < 0) throw Error(fmt::format("begin_token: token: expected >= 0, found {}", token));
    if (layer >= 0) {
      router(layer).begin_token(token);
      if (layer == 0) ++tokens_;
      return;
    }
    for (auto& r : routers_) r->begin_token(token);
    ++tokens_;
  }
  py::array_t<int32_t> prefetch(int layer, const FloatArray& pregate) {
    check_layer(layer);
    if (layer < 1) throw Error("prefetch: layer: expected >= 1 (part 1 is for the next layer)");
    const auto copies = router(layer).prefetch(layer, row_span(pregate, spec_.experts, "pregate"));
    stats_[static_cast<size_t>(layer)].prefetch += copies.size();
    return copies_array(copies);
  }
  py::tuple select(int layer, const FloatArray& z, const std::optional<FloatArray>& ws) {
    check_layer(layer);
    std::span<const float> wspan;
    if (ws) wspan = row_span(*ws, spec_.experts, "weight_scores");
    const policy::Decision& d = router(layer).select(layer, row_span(z, spec_.experts, "z"), wspan);
    LayerStats& s = stats_[static_cast<size_t>(layer)];
    s.demand += d.demand.size();
    s.evicted += d.evicted.size();
    s.replaced += static_cast<uint64_t>(d.replaced);
    ++s.selections;
    py::object weights = py::none();
    if (d.has_weights) weights = vector_array(d.weights);
    return py::make_tuple(vector_array(d.selected), weights, copies_array(d.demand));
  }
  py::dict decision(int layer) const {
    check_layer(layer);
    const policy::Decision& d = router(layer).decision(layer);
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
    return vector_array(router(layer).cache(layer).resident_sorted());
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
  void set_compute_weights(bool on) {
    for (auto& r : routers_) r->set_compute_weights(on);
  }
  std::string policy() const { return config_.to_string(); }
  int cache_slots() const { return slots_; }
  const policy::RouterSpec& spec() const { return spec_; }
  bool per_layer() const { return per_layer_; }

 private:
  void check_layer(int layer) const {
    if (layer < 0 || layer >= spec_.layers)
      throw Error(fmt::format("layer: expected 0 <= layer < {}, found {}", spec_.layers, layer));
  }
  policy::RequestRouter& router(int layer) { return *routers_[per_layer_ ? layer : 0]; }
  const policy::RequestRouter& router(int layer) const { return *routers_[per_layer_ ? layer : 0]; }

  policy::RouterSpec spec_;
  policy::PolicyConfig config_;
  std::shared_ptr<const policy::Calibration> calib_;
  int slots_;
  bool per_layer_;
  std::vector<std::unique_ptr<policy::RequestRouter>> routers_;
  std::vector<LayerStats> stats_;
  int64_t tokens_ = 0;
};

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
        d["lambda"] = c.lambda;
        d["n"] = c.prefetch_budget;
        d["w"] = c.window;
        d["evict"] = c.evict == policy::Evict::kA ? "a" : "lru";
        d["j"] = c.protect_top_j;
        d["range"] = c.range == policy::RangeMode::kRunning ? "running" : "fixed";
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

  py::class_<Router>(m, "Router")
      .def(py::init<const policy::RouterSpec&, const std::string&,
                    std::shared_ptr<const policy::Calibration>, int, bool>(),
           py::arg("spec"), py::arg("policy"), py::arg("calibration"), py::arg("cache_slots"),
           py::arg("per_layer") = false)
      .def("reset", &Router::reset, "New request: every layer back to its warm set")
      .def("begin_token", &Router::begin_token, py::arg("token"), py::arg("layer") = -1)
      .def("prefetch", &Router::prefetch, py::arg("layer"), py::arg("pregate"),
           "Part 1 for `layer` (>= 1); returns the insertions as int32 [n, 2] (expert, slot)")
      .def("select", &Router::select, py::arg("layer"), py::arg("z"),
           py::arg("weight_scores") = py::none(),
           "Part 2: returns (selected int32 [K] ascending, weights float32 [K] or None, demand "
           "copies int32 [m, 2])")
      .def("decision", &Router::decision, py::arg("layer"))
      .def("resident", &Router::resident, py::arg("layer"))
      .def("stats", &Router::stats)
      .def("reset_stats", &Router::reset_stats)
      .def("set_compute_weights", &Router::set_compute_weights, py::arg("on"))
      .def_property_readonly("policy", &Router::policy)
      .def_property_readonly("cache_slots", &Router::cache_slots)
      .def_property_readonly("per_layer", &Router::per_layer)
      .def_property_readonly("spec", &Router::spec);

  py::class_<PyTrace>(m, "Trace")
      .def_static(
          "open",
          [](const std::string& dir) {
            return PyTrace{std::make_shared<trace::Trace>(trace::Trace::open(dir))};
          },
          py::arg("dir"))
      .def_property_readonly("meta_json",
                             [](const PyTrace& self) { return self.t->meta().to_json().dump(); })
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
             const nlohmann::json j = nlohmann::json::parse(meta_json, nullptr, false);
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
