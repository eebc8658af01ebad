#include "cli/speculative.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace steermoe::cli {

void add_speculative_options(CLI::App* cmd, SpecOptions& o) {
  cmd->add_option("--draft", o.draft,
                  "Speculative decoding: a drafter model sharing the target's vocabulary (e.g. "
                  "models/steer-drafter-small for models/steer-olmoe-small)");
  cmd->add_option("--draft-k", o.draft_k, "Drafts per verification")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--spec-select", o.select,
                  "Experts of a verification block: policy (each position through the target's "
                  "--policy and logical cache, as a batched prompt; rejected positions' "
                  "insertions stay) | rollback (the same, the logical caches taken back to the "
                  "committed positions: greedy output = plain decoding's under the policy) | "
                  "exact (every position its own top-K) | block (one set per layer from the "
                  "weighted demand, AcceptMoE) | block:conf (drafter confidence weights + top-1 "
                  "rescue); the block rules need --link resident for now")
      ->check(CLI::IsMember({"policy", "rollback", "exact", "block", "block:conf"}))
      ->capture_default_str();
  cmd->add_option("--pool", o.pool,
                  "Experts per layer kept between verification blocks (0: the cache size)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--union-slots", o.union_slots,
                  "Copies a verification block may make per layer (0: the cache size)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
}

void apply_speculative(const SpecOptions& o, schedule::OffloadRequest& request) {
  if (o.draft.empty() || o.select == "policy") return;
  request.spec_select = o.select;
  request.pool = o.pool;
  request.union_slots = o.union_slots;
}

Drafter load_drafter(const SpecOptions& o, int threads, int context) {
  Drafter d;
  d.model = model::Model::load(o.draft);
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
      static_cast<double>(s.restore_copies) / committed,
      s.draft_s * 1e3 / committed, s.verify_s * 1e3 / committed);
}

}  // namespace steermoe::cli
