#include "cli/speculative.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "common/error.hpp"

namespace steermoe::cli {

void add_speculative_options(CLI::App* cmd, SpecOptions& o) {
  // The synthetic drafter proposes the text's next token: only the teacher-forced commands.
  const bool teacher_forced =
      cmd->get_name() == "bench" || cmd->get_name() == "kl" || cmd->get_name() == "score";
  cmd->add_option(
      "--draft", o.draft,
      "Speculative decoding: a drafter model sharing the target's vocabulary (e.g. "
      "models/steer-drafter-small for models/steer-olmoe-small)" +
          std::string(teacher_forced
                          ? ", or synthetic:A[,MS] (teacher forced: the text's next token "
                            "proposed with probability A, else another, MS ms of busy drafting "
                            "per draft; for --scores-from traces at shapes whose random weights "
                            "cannot draft)"
                          : ""));
  cmd->add_option("--draft-k", o.draft_k, "Drafts per verification")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--spec-select", o.select,
                  "Experts of a verification block: rollback (each position through the target's "
                  "--policy and logical cache, as a batched prompt, the logical caches then taken "
                  "back to the committed positions: greedy output = plain decoding's under the "
                  "policy) | policy (the same without taking them back: rejected positions' "
                  "insertions stay, so under PSR the text may differ from plain decoding's) | "
                  "exact (every position its own top-K) | block (one set per layer from the "
                  "weighted demand, AcceptMoE) | block:conf (drafter confidence weights + top-1 "
                  "rescue); the prompt is routed by --policy. On a link the block rules hold "
                  "the slots a block can need per layer: --pool + --union-slots (block), + "
                  "--draft-k (block:conf: its rescued experts), (--draft-k + 1) x top-k "
                  "(exact), at most every expert")
      ->check(CLI::IsMember({"policy", "rollback", "exact", "block", "block:conf"}))
      ->capture_default_str();
  cmd->add_option("--pool", o.pool,
                  "Experts per layer kept between verification blocks (0: the cache size)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_flag("--no-block-prefetch", o.no_block_prefetch,
                "On a link, do not copy the next layer's likely experts (its router on this "
                "layer's output at every block position) while a verification layer computes "
                "(latency only; to measure what the early copies hide)");
  cmd->add_option("--union-slots", o.union_slots,
                  "Copies a verification block may make per layer (0: the cache size)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
}

void apply_speculative(const SpecOptions& o, schedule::OffloadRequest& request) {
  // Options that would change nothing are said, not silently ignored.
  const bool block_rule = o.select == "exact" || o.select == "block" || o.select == "block:conf";
  const bool block_options = o.pool > 0 || o.union_slots > 0 || o.no_block_prefetch;
  if (o.draft.empty() && (o.select != "rollback" || block_options))
    std::fprintf(stderr,
                 "steermoe: warning: --spec-select, --pool, --union-slots and "
                 "--no-block-prefetch have no effect without --draft\n");
  else if (!o.draft.empty() && !block_rule && block_options)
    std::fprintf(stderr,
                 "steermoe: warning: --pool, --union-slots and --no-block-prefetch have no effect "
                 "with --spec-select %s (they belong to exact, block and block:conf)\n",
                 o.select.c_str());
  if (o.draft.empty() || o.select == "policy") return;
  request.spec_select = o.select;
  request.pool = o.pool;
  request.union_slots = o.union_slots;
  request.draft_k = o.draft_k;
  request.block_prefetch = !o.no_block_prefetch;
}

std::optional<engine::SyntheticDraft> parse_synthetic_draft(const std::string& text) {
  constexpr std::string_view kPrefix = "synthetic:";
  if (text.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string rest = text.substr(kPrefix.size());
  const size_t comma = rest.find(',');
  const auto number = [&](const std::string& field, const char* what) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (field.empty() || used != field.size() || !std::isfinite(v))
      fail("--draft", text, "expected synthetic:A[,MS] with {} a number, found '{}'", what, field);
    return v;
  };
  engine::SyntheticDraft d;
  d.acceptance = number(rest.substr(0, comma), "the acceptance A in [0, 1]");
  if (comma != std::string::npos)
    d.ms_per_token = number(rest.substr(comma + 1), "the drafting cost MS (ms per draft)");
  if (d.acceptance < 0 || d.acceptance > 1)
    fail("--draft", text, "expected an acceptance A in [0, 1], found {}", d.acceptance);
  if (d.ms_per_token < 0)
    fail("--draft", text, "expected a drafting cost MS >= 0 ms per draft, found {}",
         d.ms_per_token);
  return d;
}

std::string tokenizer_mismatch(const tokenizer::Tokenizer& drafter,
                               const tokenizer::Tokenizer& target) {
  if (drafter.size() != target.size())
    return fmt::format("{} tokens, the target {}", drafter.size(), target.size());
  if (drafter.eos() != target.eos() || drafter.bos() != target.bos())
    return fmt::format("BOS / EOS {} / {}, the target {} / {}", drafter.bos().value_or(-1),
                       drafter.eos().value_or(-1), target.bos().value_or(-1),
                       target.eos().value_or(-1));
  size_t differ = 0;
  int first = -1;
  for (size_t id = 0; id < target.size(); ++id) {
    const auto t = static_cast<tokenizer::TokenId>(id);
    if (drafter.token_bytes(t) == target.token_bytes(t)) continue;
    if (differ++ == 0) first = static_cast<int>(id);
  }
  if (differ == 0) return {};
  return fmt::format("{} of {} tokens spell differently (first: id {})", differ, target.size(),
                     first);
}

Drafter load_drafter(const SpecOptions& o, int threads, int context,
                     const tokenizer::Tokenizer& target, bool teacher_forced) {
  Drafter d;
  d.synthetic = parse_synthetic_draft(o.draft);
  if (d.synthetic && !teacher_forced)
    fail("--draft", o.draft,
         "expected a drafter model here: synthetic drafts follow a text (bench -f FILE or "
         "--scores-from TRACE without --generate, and kl)");
  if (d.synthetic) return d;
  d.model = model::Model::load(o.draft);
  if (const std::string why = tokenizer_mismatch(tokenizer::Tokenizer::load(o.draft), target);
      !why.empty())
    fail("--draft", o.draft,
         "expected a drafter with the target's tokenizer (its drafts are token ids): {}", why);
  engine::EngineParams p{.threads = threads, .context = context};
  p.offload = engine::resolve_offload(*d.model, schedule::OffloadRequest{});
  p.max_batch = 64;
  d.engine = std::make_unique<engine::Engine>(*d.model, p);
  return d;
}

std::string speculative_report(const engine::SpecStats& s) {
  const double committed = static_cast<double>(std::max<int64_t>(s.committed, 1));
  std::string depth;
  for (size_t d = 0; d < s.reached.size(); ++d) {
    if (s.reached[d] == 0) break;
    depth += fmt::format(" {:.2f}",
                         static_cast<double>(s.accepted[d]) / static_cast<double>(s.reached[d]));
  }
  return fmt::format(
      "tau {:.2f} tokens/verification ({} verifications); acceptance by depth{}; copies per "
      "committed token: block {:.2f}, verification insertions {:.2f}, restore {:.2f}; draft "
      "{:.2f} ms/token, verify {:.2f} ms/token",
      s.tau(), s.verifications, depth, static_cast<double>(s.block_copies) / committed,
      static_cast<double>(s.verify_insertions) / committed,
      static_cast<double>(s.restore_copies) / committed, s.draft_s * 1e3 / committed,
      s.verify_s * 1e3 / committed);
}

}  // namespace steermoe::cli
