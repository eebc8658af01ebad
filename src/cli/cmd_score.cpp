// `steermoe score`: the engine's own log-likelihood of continuations given contexts, split into
// tokens the way lm-evaluation-harness does (context tokens, then the rest of the whole string's
// tokens). Each line of the input is {"context": ..., "continuation": ...}; each output line is
// {"loglikelihood": sum of the continuation's token log-probabilities (in order, in double),
// "is_greedy": every continuation token is the argmax, "tokens": continuation token count}.
// A continuation with no token of its own (its text merged into the context's last tokens)
// scores 0 and greedy, as in lm-eval, with a warning on stderr.
// The log-probabilities are engine::token_logprob, the function behind `steermoe perplexity`
// and the server's echo + logprobs, so the three agree bit for bit.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/engine_options.hpp"
#include "cli/speculative.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "engine/engine.hpp"
#include "engine/logprob.hpp"
#include "engine/sampler.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::cli {

void add_score_command(CLI::App& root) {
  struct Options {
    std::string model;
    std::string requests;
    int threads = 1;
    int context = 0;
    EngineOptions engine;
    SpecOptions spec;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "score", "Log-likelihood of continuations given contexts (JSON lines in, JSON lines out)");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a HuggingFace folder")
      ->required();
  cmd->add_option("-f,--requests", o->requests,
                  "JSON lines: {\"context\": ..., \"continuation\": ...}")
      ->required();
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", o->context, "KV cache positions (0: min(trained context, 4096))")
      ->check(CLI::Range(0, 1 << 22));
  add_engine_options(cmd, o->engine);
  // Teacher forced: the continuation's tokens are committed, drafts accepted while they match.
  add_speculative_options(cmd, o->spec);
  cmd->final_callback([o] {
    auto model = model::Model::load(o->model);
    schedule::OffloadRequest request = offload_request(o->engine, *model, o->model);
    apply_speculative(o->spec, request);
    const schedule::OffloadConfig offload = resolve_policy(request, o->engine.policy, *model);
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(o->model);
    engine::Engine engine(*model, engine_params(o->engine, offload, o->threads, o->context));
    // --draft: every continuation is verified in blocks behind the drafter's proposals (the
    // target's logits of its positions then depend on the verification rule, as in decoding).
    Drafter drafter;
    std::unique_ptr<engine::SpeculativeDecoder> sd;
    if (!o->spec.draft.empty()) {
      drafter = load_drafter(o->spec, o->threads, engine.context(), tok, /*teacher_forced=*/true);
      sd = engine::make_speculative_decoder(engine, drafter.engine.get(), drafter.synthetic,
                                            {.draft_k = o->spec.draft_k});
    }
    std::ifstream in(o->requests);
    if (!in) fail(o->requests, "open", "expected a readable JSON-lines file");
    const auto V = static_cast<size_t>(model->config().vocab);
    const tokenizer::EncodeOptions enc{.parse_special = true, .add_special = false};
    std::vector<float> logits;
    std::string line;
    for (int lineno = 1; std::getline(in, line); ++lineno) {
      if (line.empty()) continue;
      const auto j = parse_json_or_discarded(line);
      if (j.is_discarded() || !j.is_object() || !j.contains("context") ||
          !j.contains("continuation") || !j["context"].is_string() ||
          !j["continuation"].is_string()) {
        fail(o->requests, fmt::format("line {}", lineno),
             "expected {{\"context\": string, \"continuation\": string}}");
      }
      std::string context = j["context"], continuation = j["continuation"];
      // lm-eval's _encode_pair: trailing spaces of the context move to the continuation.
      size_t spaces = 0;
      while (spaces < context.size() && context[context.size() - 1 - spaces] == ' ') ++spaces;
      if (spaces > 0) {
        continuation = context.substr(context.size() - spaces) + continuation;
        context.resize(context.size() - spaces);
      }
      std::vector<int32_t> ctx, cont;
      if (context.empty()) {
        if (!tok.eos()) fail(o->model, "eos", "an empty context needs an end-of-text token");
        ctx = {*tok.eos()};
        cont = tok.encode(continuation, enc);
      } else {
        const auto whole = tok.encode(context + continuation, enc);
        ctx = tok.encode(context, enc);
        cont.assign(whole.begin() + static_cast<ptrdiff_t>(std::min(ctx.size(), whole.size())),
                    whole.end());
      }
      std::vector<int32_t> ids = ctx;
      ids.insert(ids.end(), cont.begin(), cont.end());
      if (static_cast<int>(ids.size()) > engine.context()) {
        fail(o->requests, fmt::format("line {}", lineno),
             "expected context + continuation within the context of {} tokens, found {} + {} "
             "(raise -c, or truncate the context from the left as lm-eval does)",
             engine.context(), ctx.size(), cont.size());
      }
      double sum = 0.0;
      bool greedy = true;
      if (cont.empty()) {
        // The continuation's text merged into the context's last tokens (e.g. "**" + "**"), or
        // it is empty: no token of its own. lm-eval sums the log-probabilities of no token
        // (0, greedy), and so does this, with a warning since the text was not scored.
        std::fprintf(stderr,
                     "steermoe score: warning: %s: line %d: the continuation adds no token after "
                     "the context's %zu (merged across the boundary, or empty): log-likelihood "
                     "0, as lm-eval computes it\n",
                     o->requests.c_str(), lineno, ctx.size());
      } else {
        logits.resize(ids.size() * V);
        if (sd) {
          // Row i predicts ids[i + 1]: the context's last row from its prefill, the
          // continuation's from the verified blocks.
          const std::span<const float> first = sd->begin_forced(ctx, cont[0]);
          std::copy(first.begin(), first.end(),
                    logits.begin() + static_cast<ptrdiff_t>((ctx.size() - 1) * V));
          const std::span<const int32_t> rest(cont);
          for (size_t pos = 1; pos < cont.size();)
            pos += static_cast<size_t>(sd->step_forced(
                rest.subspan(pos), std::span<float>(logits.data() + (ctx.size() - 1 + pos) * V,
                                                    (cont.size() - pos) * V)));
        } else {
          engine.reset();
          engine.prefill(ids, logits);
        }
        for (size_t i = ctx.size(); i < ids.size(); ++i) {
          const std::span<const float> row(logits.data() + (i - 1) * V, V);
          sum += engine::token_logprob(row, ids[i]);
          greedy = greedy && engine::argmax(row) == ids[i];
        }
      }
      nlohmann::json out{{"loglikelihood", sum}, {"is_greedy", greedy}, {"tokens", cont.size()}};
      std::printf("%s\n", dump_json(out).c_str());
    }
  });
}

}  // namespace steermoe::cli
