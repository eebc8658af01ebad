// `steermoe run`: generates text from a prompt, streaming it, then prints prompt and decode
// speed (stderr) in the style of llama.cpp's main.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/speculative.hpp"
#include "cli/validators.hpp"
#include "common/error.hpp"
#include "common/output_file.hpp"
#include "engine/engine.hpp"
#include "engine/model_facts.hpp"
#include "engine/sampler.hpp"
#include "engine/speculative.hpp"
#include "kernels/thread_pool.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

namespace {

// llama-cli's sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, a window
// of 64 tokens for the penalties), with the repetition penalty at 1.1 (llama.cpp's default
// until 2024; small models repeat themselves without it). --temp 0 is greedy.
constexpr engine::SamplerParams kRunSampling{.temperature = 0.8f,
                                             .top_k = 40,
                                             .top_p = 0.95f,
                                             .min_p = 0.05f,
                                             .repetition_penalty = 1.1f,
                                             .penalty_last_n = 64,
                                             .seed = 0};

struct RunOptions {
  std::string model;
  std::string prompt;
  int n_predict = 64;
  int threads = kernels::physical_core_count();
  int context = 0;
  engine::SamplerParams sampling = kRunSampling;
  EngineOptions engine;
  SpecOptions spec;
  bool ignore_eos = false;
};

// Speculative decoding with the drafter of --draft: streams the committed tokens, then the
// prompt and decode figures and the drafter's acceptance (tau, by depth).
void run_speculative(const model::Model& model, engine::Engine& target,
                     const tokenizer::Tokenizer& tok, const std::vector<int32_t>& prompt,
                     const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  Drafter drafter = load_drafter(o.spec, o.threads, target.context(), tok);
  engine::SpeculativeDecoder sd(
      target, *drafter.engine,
      {.draft_k = o.spec.draft_k, .temperature = o.sampling.temperature, .seed = o.sampling.seed});
  write_stdout_text(o.prompt);
  const std::optional<int32_t> eos = tok.eos();
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(o.n_predict) + 64);
  size_t written = 0;
  bool stopped = false;
  // Writes the committed tokens not yet written; false at the end of sequence or -n.
  auto emit = [&] {
    for (; written < out.size(); ++written) {
      if (static_cast<int>(written) >= o.n_predict ||
          (!o.ignore_eos && eos && out[written] == *eos)) {
        stopped = true;
        return false;
      }
      const std::string piece = tok.token_bytes(out[written]);
      write_stdout_text(piece);
    }
    return static_cast<int>(written) < o.n_predict;
  };
  const auto t0 = Clock::now();
  if (o.n_predict > 0) out.push_back(sd.begin(prompt));
  const auto t1 = Clock::now();
  const engine::CacheStats after_prompt = target.cache_stats();
  if (o.n_predict > 0 && emit()) {
    while (!stopped && static_cast<int>(out.size()) < o.n_predict) {
      sd.step(out);
      if (!emit()) break;
    }
  }
  const auto t2 = Clock::now();
  std::fputc('\n', stdout);
  const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const engine::SpecStats& st = sd.stats();
  std::fprintf(stderr, "\nprompt: %zu tokens in %.1f ms (%.2f tok/s), target and drafter\n",
               prompt.size(), prompt_s * 1e3, static_cast<double>(prompt.size()) / prompt_s);
  const double n = static_cast<double>(st.committed);
  // The last verification may commit past -n (or past the end of sequence): the rate counts
  // every committed token (the work done), the text only the kept ones.
  const std::string kept =
      static_cast<int64_t>(written) != st.committed ? fmt::format(" ({} written)", written) : "";
  std::fprintf(stderr,
               "decode: %lld tokens committed%s in %.1f ms (%.2f tok/s, %.2f ms/token), %d "
               "thread%s, speculative k=%d %s\n",
               static_cast<long long>(st.committed), kept.c_str(), decode_s * 1e3,
               n > 0 ? n / decode_s : 0.0, n > 0 ? decode_s * 1e3 / n : 0.0, target.threads(),
               target.threads() == 1 ? "" : "s", o.spec.draft_k, o.spec.select.c_str());
  std::fprintf(stderr, "speculative: %s\n", speculative_report(st).c_str());
  if (model.config().has_moe()) {
    std::fprintf(stderr, "experts: %s, policy %s, cache %d of %d per layer\n",
                 target.expert_cache().describe().c_str(), target.policy().to_string().c_str(),
                 target.cache_slots(), model.config().experts);
    if (const engine::CacheStats t = target.cache_stats() - after_prompt; n > 0) {
      std::fprintf(stderr,
                   "copies/committed token: %.2f demand + %.2f prefetch + %.2f block + %.2f "
                   "restore; stall %.2f ms/token\n",
                   t.demand / n, t.prefetch / n, static_cast<double>(st.block_copies) / n,
                   static_cast<double>(st.restore_copies) / n, t.stall_s * 1e3 / n);
    }
  }
}

}  // namespace

void add_run_command(CLI::App& root) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = root.add_subcommand(
      "run", "Generate text from a prompt (streams the text, then prints prompt and decode speed)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", o->threads,
                  fmt::format("Threads (default: every physical core, {} here)",
                              kernels::physical_core_count()))
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", o->context, "KV cache positions (0: min(trained context, 4096))")
      ->check(CLI::Range(0, 1 << 22));
  engine::SamplerParams& sp = o->sampling;
  cmd->add_option("--temp", sp.temperature,
                  "Sampling temperature (0: greedy, the argmax of the model's logits; the "
                  "default repeat penalty is then off unless --repeat-penalty is given)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", sp.top_k, "Keep the K most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", sp.top_p,
                  "Nucleus sampling: keep tokens up to this probability mass, in (0, 1] (1: off)")
      ->check(Fraction);
  cmd->add_option("--min-p", sp.min_p,
                  "Drop tokens less likely than this fraction of the most likely one (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", sp.repetition_penalty,
                  "Penalize tokens among the last --repeat-last-n (1: off)")
      ->check(CLI::Range(0.01, 10.0));
  cmd->add_option("--repeat-last-n", sp.penalty_last_n,
                  "Tokens (prompt and generated) the penalties look back on (-1: all, 0: none)")
      ->check(CLI::Range(-1, 1 << 24));
  cmd->add_option("--presence-penalty", sp.presence_penalty,
                  "Subtracted from the logit of a token seen in that window")
      ->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--frequency-penalty", sp.frequency_penalty,
                  "Subtracted per occurrence in that window")
      ->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--seed", sp.seed, "Random seed for sampling (the same seed, the same text)");
  add_engine_options(cmd, o->engine);
  add_speculative_options(cmd, o->spec);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->final_callback([o, cmd] {
    // Greedy means the model's own argmax, as `serve` gives for temperature 0; a repeat
    // penalty asked for explicitly still applies.
    if (o->sampling.temperature == 0.0f && cmd->count("--repeat-penalty") == 0) {
      o->sampling.repetition_penalty = 1.0f;
    }
    using Clock = std::chrono::steady_clock;
    const std::optional<MemoryBudget> budget = enter_memory_budget(o->engine, o->model);
    auto model = model::Model::load(o->model);
    schedule::OffloadRequest request = offload_request(o->engine, *model, o->model);
    apply_speculative(o->spec, request);
    const schedule::OffloadConfig offload = resolve_policy(request, o->engine.policy, *model);
    const tokenizer::Tokenizer tok = load_tokenizer_for(o->model, *model);
    const std::vector<int32_t> prompt =
        tok.encode(o->prompt, {.parse_special = true, .add_special = true});
    if (prompt.empty())
      fail(o->model, "prompt", "expected at least one token, the prompt encodes to none");
    // The KV cache's pages are touched position by position: the budget holds the positions
    // this text reaches (a verification writes k + 1 past the committed ones), not all of -c.
    const int64_t reached = static_cast<int64_t>(prompt.size()) + o->n_predict +
                            (o->spec.draft.empty() ? 0 : o->spec.draft_k + 1);
    const int context = engine::resolve_context(model->config(), o->context);
    check_fits(budget, *model, offload, static_cast<int>(std::min<int64_t>(reached, context)),
               reached < context ? "-n (or the prompt)" : "-c");
    warn_past_trained_context(model->config(), o->context);
    engine::Engine engine(*model, engine_params(o->engine, offload, o->threads, o->context));
    if (static_cast<int>(prompt.size()) + o->n_predict > engine.context()) {
      fail("run", "-n", "prompt ({} tokens) + {} new tokens exceed the context of {} (raise -c)",
           prompt.size(), o->n_predict, engine.context());
    }
    if (!o->spec.draft.empty()) {
      // Speculative sampling keeps the target's distribution at a temperature; the filters and
      // penalties would change the distribution the acceptance rule is defined on.
      for (const char* option : {"--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                 "--presence-penalty", "--frequency-penalty"}) {
        if (cmd->count(option) > 0)
          fail("run", option,
               "expected no {} with --draft: speculative decoding samples with --temp and --seed "
               "only (greedy at --temp 0)",
               option);
      }
      run_speculative(*model, engine, tok, prompt, *o);
      std::fprintf(stderr, "memory: %s\n", memory_report(budget).c_str());
      return;
    }
    engine::Sampler sampler(model->config().vocab, o->sampling);
    for (int32_t t : prompt) sampler.accept(t);  // the penalties look at the prompt too
    write_stdout_text(o->prompt);
    const auto t0 = Clock::now();
    std::span<const float> logits = engine.prefill(prompt);
    const auto t1 = Clock::now();
    // Decode figures only: the prompt's copies stay out of them.
    const engine::CacheStats after_prompt = engine.cache_stats();
    const std::optional<int32_t> eos = tok.eos();
    int generated = 0;
    for (; generated < o->n_predict; ++generated) {
      const int32_t next = sampler.sample(logits);
      if (!o->ignore_eos && eos && next == *eos) break;
      sampler.accept(next);
      const std::string piece = tok.token_bytes(next);
      write_stdout_text(piece);  // stop at once when the text cannot be written
      if (generated + 1 < o->n_predict) logits = engine.decode(next);
    }
    const auto t2 = Clock::now();
    std::fputc('\n', stdout);
    const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    // `generated` tokens were sampled; generated - 1 of them were fed back (the last is not).
    const int decoded = std::max(generated - 1, 0);
    std::fprintf(stderr, "\nprompt: %zu tokens in %.1f ms (%.2f tok/s, steps of %d)\n",
                 prompt.size(), prompt_s * 1e3, static_cast<double>(prompt.size()) / prompt_s,
                 engine.prefill_step_tokens());
    // As llama.cpp's "eval" count: the first generated token comes from the prompt's pass.
    std::fprintf(stderr,
                 "decode: %d tokens in %.1f ms (%.2f tok/s, %.2f ms/token), %d thread%s; %d "
                 "generated, the first from the prompt's pass\n",
                 decoded, decode_s * 1e3, decoded > 0 ? decoded / decode_s : 0.0,
                 decoded > 0 ? decode_s * 1e3 / decoded : 0.0, engine.threads(),
                 engine.threads() == 1 ? "" : "s", generated);
    if (!model->config().has_moe()) {
      std::fprintf(stderr, "experts: none (dense model)\n");
    } else {
      std::fprintf(stderr, "experts: %s, policy %s, cache %d of %d per layer\n",
                   engine.expert_cache().describe().c_str(), engine.policy().to_string().c_str(),
                   engine.cache_slots(), model->config().experts);
    }
    const engine::CacheStats logical = engine.cache_stats() - after_prompt;
    if (!logical.physical && logical.routed_tokens > 0 &&
        engine.cache_slots() < model->config().experts) {
      // No link copies here; what an offloading link would copy, as serve reports it.
      const double n = static_cast<double>(logical.routed_tokens);
      std::fprintf(stderr,
                   "copies/token: none on this link; an offloading link would copy %.2f demand + "
                   "%.2f prefetch (the logical cache's insertions)\n",
                   static_cast<double>(logical.logical_demand) / n,
                   static_cast<double>(logical.logical_prefetch) / n);
    }
    if (const engine::CacheStats t = engine.cache_stats() - after_prompt; t.tokens > 0) {
      const double n = static_cast<double>(t.tokens);
      // The three classes split the prefetches the policy emitted (some dropped as stale or
      // still pending are never copied), not the prefetch copies.
      std::fprintf(stderr,
                   "copies/token: %.2f demand + %.2f prefetch; prefetches emitted %.2f (in time "
                   "%.2f, late %.2f, unused %.2f; dropped before copying %.2f); stall %.2f "
                   "ms/token, host %.3f ms/token\n",
                   t.demand / n, t.prefetch / n, t.prefetch_emitted / n, t.prefetch_in_time / n,
                   t.prefetch_late / n, t.prefetch_unused / n, t.prefetch_dropped / n,
                   t.stall_s * 1e3 / n, t.host_s * 1e3 / n);
      if (engine.expert_cache().kind() == engine::LinkKind::kSim) {
        std::fprintf(stderr, "simulated: %.3f ms/token on the profile's clock\n",
                     t.latency_s * 1e3 / n);
      }
    }
    std::fprintf(stderr, "memory: %s\n", memory_report(budget).c_str());
  });
}

}  // namespace steermoe::cli
