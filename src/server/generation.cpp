#include "server/generation.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#include "common/error.hpp"
#include "engine/logprob.hpp"
#include "engine/sampler.hpp"
#include "engine/speculative.hpp"
#include "server/utf8.hpp"

namespace steermoe::server {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The copies so far: the link's when it moves experts (--link sim:, emulated:, disk), else the
// logical insertions (resident: none are made).
CopyCounters read_copy_counters(const engine::Engine& engine) {
  const engine::CacheStats s = engine.cache_stats();
  return {s.demand_copies(), s.prefetch_copies()};
}

ScoredToken score(std::span<const float> logits, int32_t id, int n_top,
                  std::vector<int32_t>& scratch) {
  ScoredToken t;
  t.id = id;
  const double norm = engine::log_normalizer(logits);
  t.logprob = engine::token_logprob(norm, logits, id);
  engine::top_tokens(logits, n_top, scratch);
  bool has_self = false;
  for (int32_t alt : scratch) {
    t.top.emplace_back(alt, engine::token_logprob(norm, logits, alt));
    has_self = has_self || alt == id;
  }
  if (!has_self) t.top.emplace_back(id, *t.logprob);
  return t;
}

}  // namespace

size_t find_stop(const std::string& text, const std::vector<std::string>& stops, size_t from) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t p = text.find(s, from);
    if (p != std::string::npos && p < best) best = p;
  }
  return best;
}

size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(s.size() - (s.empty() ? 0 : 1), text.size());
    for (size_t len = max_len; len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

namespace {

// The prompt through the engine: one prefill, or chunks with every position's logits when the
// prompt is scored (echo + logprobs). Leaves the last position's logits in `last`.
void process_prompt(engine::Engine& engine, int chunk, Job& job, std::vector<float>& last,
                    std::vector<int32_t>& scratch) {
  const SamplingOptions& o = job.options;
  const std::vector<int32_t>& prompt = job.prompt;
  const size_t V = last.size();
  if (!(o.echo && o.logprobs >= 0)) {
    std::span<const float> l = engine.prefill(prompt);
    std::copy(l.begin(), l.end(), last.begin());
    return;
  }
  std::vector<ScoredToken> scored(prompt.size());
  scored[0].id = prompt[0];
  std::vector<float> rows(static_cast<size_t>(chunk) * V);
  for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(chunk)) {
    if (job.cancelled.load()) break;
    const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(chunk));
    std::span<float> out(rows.data(), n * V);
    engine.prefill(std::span<const int32_t>(prompt).subspan(begin, n), out);
    for (size_t i = 0; i < n; ++i) {
      const size_t pos = begin + i;  // row pos predicts prompt[pos + 1]
      std::span<const float> row = out.subspan(i * V, V);
      if (pos + 1 < prompt.size()) {
        scored[pos + 1] = score(row, prompt[pos + 1], o.logprobs, scratch);
      } else {
        std::copy(row.begin(), row.end(), last.begin());
      }
    }
  }
  std::lock_guard lock(job.mu);
  job.prompt_tokens = std::move(scored);
}

engine::SamplerParams sampler_params(const SamplingOptions& o) {
  return {.temperature = o.temperature,
          .top_k = o.top_k,
          .top_p = o.top_p,
          .min_p = o.min_p,
          .repetition_penalty = o.repetition_penalty,
          .presence_penalty = o.presence_penalty,
          .frequency_penalty = o.frequency_penalty,
          .penalty_last_n = o.penalty_last_n,
          .seed = o.seed};
}

// Appends one generated token and its text; true if a stop string ended the text.
bool add_token(const tokenizer::Tokenizer& tok, Job& job, ScoredToken t, size_t max_stop) {
  const SamplingOptions& o = job.options;
  bool stopped = false;
  {
    std::lock_guard lock(job.mu);
    const size_t before = job.text.size();
    job.text += tok.token_bytes(t.id);
    job.generated.push_back(std::move(t));
    const size_t from = before >= max_stop ? before - max_stop + 1 : 0;
    const size_t at = o.stop.empty() ? std::string::npos : find_stop(job.text, o.stop, from);
    if (at != std::string::npos) {
      job.text.resize(at);
      stopped = true;
    }
    size_t safe = job.text.size();
    if (!stopped) {
      safe -= stop_holdback(job.text, o.stop);
      safe = complete_prefix(std::string_view(job.text).substr(0, safe));
    }
    job.safe_bytes = std::max(job.safe_bytes, safe);
    job.safe_tokens = job.generated.size();
  }
  job.notify();
  return stopped;
}

// Samples up to max_tokens tokens after the prompt; returns the finish reason.
std::string generate(engine::Engine& engine, const tokenizer::Tokenizer& tok, Job& job,
                     std::span<const float> logits, std::vector<int32_t>& scratch, int& decoded,
                     const TokenHook& hook) {
  const SamplingOptions& o = job.options;
  const int room = engine.context() - static_cast<int>(job.prompt.size());
  const int max_new = std::max(0, std::min(o.max_tokens, room));
  const std::optional<int32_t> eos = tok.eos();
  engine::Sampler sampler(engine.config().vocab, sampler_params(o));
  for (int32_t t : job.prompt) sampler.accept(t);  // the penalties look at the prompt too
  size_t max_stop = 0;
  for (const std::string& s : o.stop) max_stop = std::max(max_stop, s.size());
  for (int i = 0; i < max_new; ++i) {
    if (job.cancelled.load()) return "cancelled";
    const int32_t id = sampler.sample(logits);
    ScoredToken t = o.logprobs >= 0 ? score(logits, id, o.logprobs, scratch) : ScoredToken{id};
    if (!o.ignore_eos && eos && id == *eos) {
      // The end-of-sequence token belongs to the completion (its logprob is reported and it
      // counts in usage, as vLLM does: lm-eval takes the last logprobs entry for the
      // generated token) but not to its text.
      std::lock_guard lock(job.mu);
      job.generated.push_back(std::move(t));
      return "stop";
    }
    if (add_token(tok, job, std::move(t), max_stop)) return "stop";
    sampler.accept(id);
    if (i + 1 < max_new) {
      logits = engine.decode(id);
      ++decoded;
      if (hook) hook(engine, false);
    }
  }
  return "length";  // max_tokens reached, or the context is full
}

// Speculative decoding: the prompt through both engines, then verifications until max_tokens,
// the end of sequence, a stop string or a cancel; tokens appended as they are committed.
std::string generate_speculative(engine::Engine& engine, const tokenizer::Tokenizer& tok, Job& job,
                                 const Drafting& drafting, Clock::time_point t_start,
                                 int& decoded, int64_t& verifications, const TokenHook& hook) {
  const SamplingOptions& o = job.options;
  const int room = engine.context() - static_cast<int>(job.prompt.size());
  const int max_new = std::max(0, std::min(o.max_tokens, room));
  const std::optional<int32_t> eos = tok.eos();
  size_t max_stop = 0;
  for (const std::string& s : o.stop) max_stop = std::max(max_stop, s.size());
  engine::SpeculativeDecoder sd(
      engine, *drafting.drafter,
      {.draft_k = drafting.draft_k, .temperature = o.temperature, .seed = o.seed});
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(max_new) + static_cast<size_t>(drafting.draft_k) + 1);
  size_t taken = 0;
  std::string finish = "length";
  // Takes the committed tokens into the job; false once the job has ended.
  auto take = [&] {
    for (; taken < out.size(); ++taken) {
      if (static_cast<int>(taken) >= max_new) return false;
      const int32_t id = out[taken];
      if (!o.ignore_eos && eos && id == *eos) {
        std::lock_guard lock(job.mu);
        job.generated.push_back(ScoredToken{id});
        finish = "stop";
        return false;
      }
      if (add_token(tok, job, ScoredToken{id}, max_stop)) {
        finish = "stop";
        return false;
      }
    }
    return static_cast<int>(taken) < max_new;
  };
  if (max_new > 0) {
    out.push_back(sd.begin(job.prompt));
  } else {
    engine.prefill(job.prompt);
  }
  if (hook) hook(engine, false);
  {
    std::lock_guard lock(job.mu);
    job.prompt_ms = ms_since(t_start);
    job.prompt_done = true;
  }
  job.notify();
  while (take()) {
    if (job.cancelled.load()) {
      finish = "cancelled";
      break;
    }
    sd.step(out);
    if (hook) hook(engine, false);
  }
  decoded = static_cast<int>(sd.stats().committed);
  verifications = sd.stats().verifications;
  return finish;
}

}  // namespace

bool drafts_exactly(const SamplingOptions& o) {
  return o.logprobs < 0 && !o.echo && o.top_k == 0 && o.top_p >= 1.0f && o.min_p == 0.0f &&
         o.repetition_penalty == 1.0f && o.presence_penalty == 0.0f &&
         o.frequency_penalty == 0.0f;
}

void run_job(engine::Engine& engine, const tokenizer::Tokenizer& tok, int chunk, Job& job,
             const TokenHook& hook, const Drafting& drafting) {
  const auto t_start = Clock::now();
  try {
    SM_ASSERT(!job.prompt.empty() && chunk > 0);
    std::vector<int32_t> scratch;
    engine.reset();
    const CopyCounters copies_before = read_copy_counters(engine);
    const bool speculative = drafting.drafter != nullptr && drafts_exactly(job.options);
    int decoded = 0;
    int64_t verifications = 0;
    std::string finish;
    auto t_decode = Clock::now();
    if (speculative) {
      // The prompt goes through both engines inside (prompt_ms is set there).
      finish = generate_speculative(engine, tok, job, drafting, t_start, decoded, verifications,
                                    hook);
    } else {
      std::vector<float> last(static_cast<size_t>(engine.config().vocab));
      process_prompt(engine, chunk, job, last, scratch);
      if (hook) hook(engine, false);
      {
        std::lock_guard lock(job.mu);
        job.prompt_ms = ms_since(t_start);
        job.prompt_done = true;
      }
      job.notify();
      t_decode = Clock::now();
      finish = generate(engine, tok, job, last, scratch, decoded, hook);
    }
    if (hook) hook(engine, true);
    const CopyCounters copies_after = read_copy_counters(engine);
    std::lock_guard lock(job.mu);
    job.decode_ms = speculative ? ms_since(t_start) - job.prompt_ms : ms_since(t_decode);
    job.decoded = decoded;
    job.speculative = speculative;
    job.verifications = verifications;
    job.copies = {copies_after.demand - copies_before.demand,
                  copies_after.prefetch - copies_before.prefetch};
    job.finish_reason = finish;
    job.safe_bytes = job.text.size();
    job.safe_tokens = job.generated.size();
    job.done = true;
  } catch (const std::exception& e) {
    std::lock_guard lock(job.mu);
    job.error = e.what();
    job.done = true;
  }
  job.notify();
}

}  // namespace steermoe::server
