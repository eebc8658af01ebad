// Decode ms/token at batch 1 with every expert resident, against the memory-bandwidth floor
// (bytes of the weights one token reads / measured read bandwidth), at 1 and 2 threads. JSON on
// stdout.
//
// Model: $STEERMOE_BENCH_MODEL (a .gguf or HF folder), or else a random OLMoE-1B-7B-shaped BF16
// GGUF written to $STEERMOE_BENCH_DIR (default /tmp) by make-model's code. If the machine has
// too little free memory to keep all 16 layers resident, the generated model keeps fewer layers
// (reported as "layers"): the floor and the measurement scale together. $STEERMOE_BENCH_LAYERS
// forces a layer count. If $LLAMA_CPP_DIR is set, llama.cpp's llama-bench runs on the same GGUF
// side by side (its JSON is embedded in the output).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common/read_sum.hpp"
#include "common/json_input.hpp"
#include "engine/engine.hpp"
#include "engine/sampler.hpp"
#include "kernels/kernels.hpp"
#include "model/weights_layout.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using steermoe::engine::Engine;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads): on the shared machine, time the process was
// not running is not counted, so at 1 thread this is the decode time on an idle core.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Best read bandwidth (bytes/s) of 2 plain and 2 prefetching passes (read_sum.hpp) over a
// buffer far larger than the caches.
double read_bandwidth(int threads, size_t bytes) {
  const steermoe::bench::HugePageFloats buf(bytes / sizeof(float));
  return steermoe::bench::read_bandwidth({buf.data(), buf.size()}, threads, 2);
}

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

fs::path prepare_model(nlohmann::json& report) {
  if (const char* m = std::getenv("STEERMOE_BENCH_MODEL")) return m;
  steermoe::model::ModelConfig c = steermoe::model::shape_config("OLMoE-1B-7B");
  int layers = c.layers;
  if (const char* l = std::getenv("STEERMOE_BENCH_LAYERS")) {
    layers = std::clamp(std::atoi(l), 1, c.layers);
  } else {
    // Keep the whole file plus 3 GiB of headroom in memory.
    const uint64_t per_layer = 862'000'000ull;  // bf16 bytes of one OLMoE-1B-7B layer
    const uint64_t avail = mem_available_bytes();
    const uint64_t budget =
        avail > (3ull << 30) + 400'000'000ull ? avail - (3ull << 30) - 400'000'000ull : 0;
    layers = static_cast<int>(
        std::clamp<uint64_t>(budget / per_layer, 1, static_cast<uint64_t>(c.layers)));
  }
  c.layers = layers;
  c.moe_layer.resize(static_cast<size_t>(layers));
  const char* dir = std::getenv("STEERMOE_BENCH_DIR");
  const fs::path path = fs::path(dir ? dir : "/tmp") /
                        ("steermoe-bench-olmoe-1b-7b-bf16-" + std::to_string(layers) + "l.gguf");
  report["generated_model_layers"] = layers;
  if (!fs::exists(path)) {
    std::fprintf(stderr, "bench: writing %s (%d layers)...\n", path.c_str(), layers);
    steermoe::model::write_model(
        c, path, steermoe::model::random_slot_source(steermoe::model::DType::kBF16, 1));
  }
  return path;
}

// Decode timing interleaved with bandwidth measurements (the machines are shared and noisy:
// ratios are only meaningful when both are measured at the same time). The floor uses the best
// bandwidth seen, so the reported fraction is conservative.
nlohmann::json time_decode(const steermoe::model::Model& m, int threads, int tokens,
                           uint64_t bytes) {
  Engine engine(m, {.threads = threads, .context = 256});
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back((i * 7919 + 11) % m.config().vocab);
  engine.prefill(prompt);  // warm-up: maps every attention/dense weight page
  engine.reset();
  const auto p0 = Clock::now();
  auto logits = engine.prefill(prompt);
  const double prompt_s = seconds_since(p0);
  int32_t next = steermoe::engine::argmax(logits);
  // Warm-up: bring every weight page in (all experts resident) before timing.
  for (int i = 0; i < 4; ++i) next = steermoe::engine::argmax(engine.decode(next));
  std::vector<double> per_token;
  std::vector<double> cpu_per_token;
  double best_bw = 0.0;
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    best_bw = std::max(best_bw, read_bandwidth(threads, size_t{1} << 30));
    for (int i = 0; i < (tokens + kRounds - 1) / kRounds; ++i) {
      const double c0 = process_cpu_seconds();
      const auto t0 = Clock::now();
      logits = engine.decode(next);
      per_token.push_back(seconds_since(t0) * 1e3);
      cpu_per_token.push_back((process_cpu_seconds() - c0) * 1e3);
      next = steermoe::engine::argmax(logits);
    }
  }
  std::vector<double> sorted = per_token;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0.0;
  for (double v : per_token) mean += v;
  mean /= static_cast<double>(per_token.size());
  const double median = sorted[sorted.size() / 2];
  std::sort(cpu_per_token.begin(), cpu_per_token.end());
  const double cpu_median = cpu_per_token[cpu_per_token.size() / 2];
  const double floor_ms = static_cast<double>(bytes) / best_bw * 1e3;
  return {{"threads", threads},
          {"tokens", per_token.size()},
          {"ms_per_token_mean", mean},
          {"ms_per_token_median", median},
          {"ms_per_token_min", sorted.front()},
          {"read_bandwidth_gb_s", best_bw / 1e9},
          {"floor_ms_per_token", floor_ms},
          {"fraction_of_floor", floor_ms / median},
          {"fraction_of_floor_best_token", floor_ms / sorted.front()},
          {"cpu_ms_per_token_median", cpu_median},
          // CPU time of all threads: comparable with the floor at 1 thread only.
          {"fraction_of_floor_cpu", floor_ms / cpu_median},
          {"prompt_tokens", prompt.size()},
          {"prompt_tok_per_s", static_cast<double>(prompt.size()) / prompt_s}};
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

}  // namespace

int main() {
  try {
    steermoe::kernels::select_isa_from_env();
    nlohmann::json report;
    const fs::path path = prepare_model(report);
    auto model = steermoe::model::Model::load(path);
    const uint64_t bytes = model->bytes_per_token();
    report["model"] = path.string();
    report["config"] = model->config().summary();
    report["weight_dtype"] = std::string(steermoe::model::dtype_name(model->weight_dtype()));
    report["isa"] = std::string(steermoe::kernels::isa_name(steermoe::kernels::active_isa()));
    report["bytes_per_token"] = bytes;
    const int tokens = std::getenv("STEERMOE_BENCH_TOKENS")
                           ? std::max(1, std::atoi(std::getenv("STEERMOE_BENCH_TOKENS")))
                           : 24;
    nlohmann::json runs = nlohmann::json::array();
    for (int threads : {1, 2}) runs.push_back(time_decode(*model, threads, tokens, bytes));
    report["runs"] = runs;
    if (const char* llama = std::getenv("LLAMA_CPP_DIR")) {
      fs::path gguf = path;
      if (path.extension() != ".gguf") {
        gguf = fs::path(std::getenv("STEERMOE_BENCH_DIR") ? std::getenv("STEERMOE_BENCH_DIR")
                                                          : "/tmp") /
               "steermoe-bench-converted.gguf";
        steermoe::model::write_model(model->config(), gguf,
                                     steermoe::model::model_slot_source(*model));
      }
      const fs::path bench = fs::path(llama) / "build" / "bin" / "llama-bench";
      const std::string out =
          run_capture(bench.string() + " -m " + gguf.string() + " -p 0 -n " +
                      std::to_string(tokens) + " -t 1,2 -r 3 -o json 2>/dev/null");
      nlohmann::json parsed = steermoe::parse_json_or_discarded(out);
      report["llama_cpp"] = parsed.is_discarded() ? nlohmann::json(out) : parsed;
      if (!parsed.is_discarded() && parsed.is_array()) {
        for (auto& run : parsed) {
          if (run.contains("avg_ts") && run.contains("n_threads")) {
            const int t = run["n_threads"].get<int>();
            const double llama_ms = 1e3 / run["avg_ts"].get<double>();
            for (auto& r : report["runs"]) {
              if (r["threads"] == t) {
                r["llama_cpp_ms_per_token"] = llama_ms;
                r["speedup_vs_llama_cpp"] = llama_ms / r["ms_per_token_median"].get<double>();
              }
            }
          }
        }
      }
    }
    std::printf("%s\n", steermoe::dump_json(report, 2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
