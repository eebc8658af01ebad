// The steermoe side of the side-by-side benchmark (bench/peers/compare.py): the same tests as
// llama.cpp's llama-bench, on the same GGUF, so that the two are timed alike.
//
//   bench_pp_tg -m MODEL [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-r REPS] [-b MAX_BATCH]
//               [--floor]
//   bench_pp_tg --bandwidth [-t THREADS]
//
// -p N (N > 0, -n 0): prefill ("pp"): N tokens from an empty context in one prefill() (batches of
// up to the engine's max_batch), timed; tok/s = N / time. -n N (-p 0): decode ("tg"): N tokens
// one at a time from an empty context, each computing the logits, timed together; tok/s = N /
// time. As llama-bench: one untimed warm-up run of the same test first, then REPS timed runs,
// pseudo-random token ids. Every expert is resident (the all-resident floor of the engine).
// --bandwidth prints the best of 3 read passes of each kind (plain, prefetching) over 1 GiB
// (bytes/s) with THREADS threads.
// --floor (decode) runs that probe just before every timed run and reports each run's fraction
// of the floor against it: a virtual machine's read bandwidth moves by 10-20% within seconds,
// so a probe taken minutes earlier cannot tell a slow kernel from a slow moment.
// Output: one JSON object on stdout.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common/read_sum.hpp"
#include "common/json_input.hpp"
#include "engine/engine.hpp"
#include "kernels/kernels.hpp"
#include "model/weights.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  int threads = 1;
  int prompt = 0;
  int gen = 0;
  int reps = 3;
  bool bandwidth = false;
  bool floor = false;  // --floor: a read probe before every timed decode run
  int batch = 0;       // 0: the engine's default max_batch
};

constexpr const char* kUsage = R"(usage:
  bench_pp_tg -m MODEL [-t THREADS] [-p PROMPT_TOKENS | -n GEN_TOKENS] [-r REPS] [-b MAX_BATCH]
              [--floor]
  bench_pp_tg --bandwidth [-t THREADS]

The steermoe side of bench/peers/compare.py: llama-bench's tests on the same GGUF file, every
expert resident. Prints one JSON object.

  -m MODEL        GGUF or safetensors model
  -t THREADS      kernel threads (default 1)
  -p N            prefill test: N tokens from an empty context (N <= 512), tok/s = N / time
  -n N            decode test: N tokens one at a time from an empty context
  -r REPS         timed runs after one untimed warm-up (default 3)
  -b MAX_BATCH    the engine's prefill batch (default: the engine's own, reported as max_batch)
  --bandwidth     best of 3 plain and 3 prefetching read passes over 1 GiB with THREADS threads
                  (bytes/s)
  --floor         decode only: that probe again just before every timed run; adds
                  read_bytes_per_s and fraction_of_floor (tok/s x bytes_per_token / probe), one
                  per run
  -h, --help      this text
STEERMOE_KERNELS=scalar|avx2|avx512|avx512bf16 forces a kernel path.
)";

// A whole non-negative decimal int, or an error naming the option.
int parse_count(const std::string& option, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < 0 || v > 1'000'000'000) {
    throw std::runtime_error(option + ": expected a whole number >= 0, found '" + text + "'");
  }
  return static_cast<int>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + k);
      return argv[++i];
    };
    if (k == "-h" || k == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (k == "-m") {
      a.model = next();
    } else if (k == "-t") {
      a.threads = parse_count(k, next());
    } else if (k == "-p") {
      a.prompt = parse_count(k, next());
    } else if (k == "-n") {
      a.gen = parse_count(k, next());
    } else if (k == "-r") {
      a.reps = parse_count(k, next());
    } else if (k == "-b") {
      a.batch = parse_count(k, next());
    } else if (k == "--bandwidth") {
      a.bandwidth = true;
    } else if (k == "--floor") {
      a.floor = true;
    } else {
      throw std::runtime_error("unknown argument " + k + " (--help lists the options)");
    }
  }
  if (!a.bandwidth && (a.model.empty() || (a.prompt > 0) == (a.gen > 0))) {
    throw std::runtime_error("expected -m MODEL and exactly one of -p N, -n N");
  }
  if (a.floor && (a.bandwidth || a.gen == 0)) {
    throw std::runtime_error("--floor: expected a decode test (-n N), the floor is a decode's");
  }
  a.threads = std::max(1, a.threads);
  a.reps = std::max(1, a.reps);
  return a;
}

// One test run: seconds for the prefill of `prompt` tokens or the decode of `gen` tokens.
double run_once(steermoe::engine::Engine& engine, const Args& a, uint32_t& seed, int vocab) {
  auto next_token = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab));
  };
  engine.reset();
  if (a.prompt > 0) {
    std::vector<int32_t> tokens(static_cast<size_t>(a.prompt));
    for (auto& t : tokens) t = next_token();
    const auto t0 = Clock::now();
    engine.prefill(tokens);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < a.gen; ++i) engine.decode(next_token());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    steermoe::kernels::select_isa_from_env();  // compare.py --kernels
    nlohmann::json out;
    out["isa"] = std::string(steermoe::kernels::isa_name(steermoe::kernels::active_isa()));
    out["threads"] = a.threads;
    if (a.bandwidth) {
      const steermoe::bench::HugePageFloats probe((size_t{1} << 30) / sizeof(float));
      out["read_bytes_per_s"] =
          steermoe::bench::read_bandwidth({probe.data(), probe.size()}, a.threads, 3);
      std::printf("%s\n", steermoe::dump_json(out).c_str());
      return 0;
    }
    auto model = steermoe::model::Model::load(a.model);
    const int vocab = model->config().vocab;
    steermoe::engine::EngineParams params{.threads = a.threads, .context = 512};
    if (a.batch > 0) params.max_batch = a.batch;
    out["max_batch"] = params.max_batch;
    steermoe::engine::Engine engine(*model, params);
    uint32_t seed = 12345;
    run_once(engine, a, seed, vocab);  // warm-up (maps the pages, grows scratch)
    // Filled before the timed runs, so the probe's pages are not first touched between them.
    const steermoe::bench::HugePageFloats probe(a.floor ? (size_t{1} << 30) / sizeof(float) : 0);
    const double bytes_per_token = static_cast<double>(model->bytes_per_token());
    std::vector<double> tok_s, read_bytes_per_s, fraction_of_floor;
    for (int r = 0; r < a.reps; ++r) {
      if (a.floor)
        read_bytes_per_s.push_back(
            steermoe::bench::read_bandwidth({probe.data(), probe.size()}, a.threads, 3));
      const double s = run_once(engine, a, seed, vocab);
      tok_s.push_back(static_cast<double>(a.prompt > 0 ? a.prompt : a.gen) / s);
      if (a.floor)
        fraction_of_floor.push_back(tok_s.back() * bytes_per_token / read_bytes_per_s.back());
    }
    out["model"] = a.model;
    out["test"] = a.prompt > 0 ? "pp" + std::to_string(a.prompt) : "tg" + std::to_string(a.gen);
    out["bytes_per_token"] = model->bytes_per_token();
    out["tok_s"] = tok_s;
    if (a.floor) {
      out["read_bytes_per_s"] = read_bytes_per_s;
      out["fraction_of_floor"] = fraction_of_floor;
    }
    std::printf("%s\n", steermoe::dump_json(out).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pp_tg: %s\n", e.what());
    return 1;
  }
  return 0;
}
