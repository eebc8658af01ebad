// One full policy step per layer (part 1 for the next layer + part 2 + statistics update) at the
// three model shapes of the foundation issue and 50% / 25% residency, on synthetic scores with
// temporal locality and cross-layer predictability. Goal: <= 0.5 us per layer for 64 experts and
// <= 1.5 us for 256 on one core. Run with --benchmark_format=json. Every case runs once per
// top-k path the CPU has (/avx512, /avx2, /sse2) and once as the scalar reference step (/ref).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "policy/router.hpp"
#include "schedule/offload_step.hpp"

namespace steermoe::policy {
namespace {

struct Shape {
  const char* name;
  int layers, experts, top_k;
  ScoreMode mode;
};

constexpr Shape kShapes[] = {
    {"olmoe", 16, 64, 8, ScoreMode::kSoftmax},
    {"moonlight", 26, 64, 6, ScoreMode::kSigmoid},
    {"qwen36", 40, 256, 8, ScoreMode::kSoftmax},
};

// Scores for `steps` tokens: a drifting per-layer preference (locality) plus noise; the pre-gate
// is the next layer's score plus noise (predictability).
struct Scores {
  int steps, layers, experts;
  std::vector<float> z, g;
  std::vector<int32_t> tokens;
};

Scores make_scores(const Shape& s, int steps, uint32_t seed) {
  Scores out{steps, s.layers, s.experts, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise;
  std::vector<float> pref(static_cast<size_t>(s.layers) * s.experts);
  for (auto& p : pref) p = noise(rng);
  out.z.resize(static_cast<size_t>(steps) * s.layers * s.experts);
  out.g.resize(out.z.size());
  for (int t = 0; t < steps; ++t) {
    out.tokens.push_back(static_cast<int32_t>(rng() % 4096));
    for (int l = 0; l < s.layers; ++l) {
      for (int e = 0; e < s.experts; ++e) {
        float& p = pref[static_cast<size_t>(l) * s.experts + e];
        p = 0.9f * p + 0.45f * noise(rng);
        float v = 2.0f * p + noise(rng);
        if (s.mode == ScoreMode::kSigmoid) v = 1.0f / (1.0f + std::exp(-v));
        const size_t i = (static_cast<size_t>(t) * s.layers + l) * s.experts + e;
        out.z[i] = v;
        out.g[i] = v + 0.5f * noise(rng);
      }
    }
  }
  return out;
}

struct Isa {
  const char* name;
  TopKPath path;
};

// The ISA of the whole step is forced through the router's top-k path, so AVX2 figures can be
// measured on an AVX-512 machine side by side with the AVX-512 ones ("ref": the scalar
// reference step, three plain selections).
constexpr Isa kIsas[] = {
    {"avx512", TopKPath::kAvx512},
    {"avx2", TopKPath::kAvx2},
    {"sse2", TopKPath::kSse2},
    {"ref", TopKPath::kReference},
};

void BM_PolicyStep(benchmark::State& state, Shape shape, const char* policy, int residency_pct,
                   bool with_weights, Isa isa) {
  RouterSpec spec{.experts = shape.experts,
                  .top_k = shape.top_k,
                  .layers = shape.layers,
                  .mode = shape.mode,
                  .norm_topk_prob = shape.mode == ScoreMode::kSigmoid,
                  .routed_scaling_factor = shape.mode == ScoreMode::kSigmoid ? 2.446f : 1.0f,
                  .default_window = shape.mode == ScoreMode::kSigmoid ? 4 : 8};
  const Scores held_out = make_scores(shape, 256, 1);
  Calibrator calibrator(spec, 4096);
  for (int t = 0; t < held_out.steps; ++t) {
    for (int l = 0; l < shape.layers; ++l) {
      calibrator.add(l, held_out.tokens[t],
                     std::span<const float>(
                         &held_out.z[(static_cast<size_t>(t) * shape.layers + l) * shape.experts],
                         shape.experts));
    }
    calibrator.end_step();
  }
  const Calibration calib = calibrator.finish();
  const Scores scores = make_scores(shape, 128, 2);
  const int cache = shape.experts * residency_pct / 100;
  // The step the engine runs (logical only), driven by the synthetic rows: the benchmark times
  // the same per-token order as decoding, not a copy of it.
  schedule::OffloadStep step(spec, parse_policy(policy), calib, {.cache_slots = cache});
  // Execution weights are the model's computation, not the policy's: timed separately by the
  // WithWeights variants.
  step.set_compute_weights(with_weights);
  step.set_top_k_path(isa.path);
  struct Driver final : schedule::LayerDriver {
    const Scores& rows;
    const Shape& shape;
    bool with_weights;
    int t = 0;
    Driver(const Scores& s, const Shape& sh, bool w) : rows(s), shape(sh), with_weights(w) {}
    schedule::LayerScores scores(int l) override {
      const size_t row = (static_cast<size_t>(t) * shape.layers + l) * shape.experts;
      const std::span<const float> z(&rows.z[row], shape.experts);
      return {
          .z = z,
          .weight_scores = with_weights ? z : std::span<const float>{},
          .pregate_next = l + 1 < shape.layers
                              ? std::span<const float>(&rows.g[row + shape.experts], shape.experts)
                              : std::span<const float>{}};
    }
    void routed(int, int, const Decision& d, std::span<const float>) override {
      benchmark::DoNotOptimize(d.selected.data());
    }
  } driver(scores, shape, with_weights);
  int64_t layer_steps = 0;
  for (auto _ : state) {
    if (driver.t == scores.steps) {
      driver.t = 0;
      step.begin_request();
    }
    step.run_token(scores.tokens[driver.t], driver);
    layer_steps += shape.layers;
    ++driver.t;
  }
  // Seconds per layer step (kIsRate | kInvert); Google Benchmark prints it scaled (e.g. "312ns").
  state.counters["seconds_per_layer"] = benchmark::Counter(
      static_cast<double>(layer_steps), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(layer_steps);
  state.SetLabel(std::string(shape.name) + " " + policy + " residency " +
                 std::to_string(residency_pct) + "% " + isa.name);
}

void register_all() {
  for (const Shape& shape : kShapes) {
    for (int pct : {50, 25}) {
      for (const char* policy :
           {"psr:lambda=0.3,n=1", "exact:evict=lru", "cacheprior:lambda=0.2"}) {
        for (const Isa& isa : kIsas) {
          if (!top_k_path_supported(isa.path)) continue;  // not run rather than run as another
          const std::string name = std::string("PolicyStep/") + shape.name + "/" + policy + "/" +
                                   std::to_string(pct) + "/" + isa.name;
          benchmark::RegisterBenchmark(name.c_str(), BM_PolicyStep, shape, policy, pct, false, isa);
          benchmark::RegisterBenchmark((name + "/WithWeights").c_str(), BM_PolicyStep, shape,
                                       policy, pct, true, isa);
        }
      }
    }
  }
}

}  // namespace
}  // namespace steermoe::policy

int main(int argc, char** argv) {
  steermoe::policy::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
