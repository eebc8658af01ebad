#include "schedule/offload_config.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "common/error.hpp"

namespace steermoe::schedule {

namespace {

int resolve_cache(const OffloadRequest& r, const policy::RouterSpec& spec) {
  if (r.cache > 0 && r.residency > 0)
    fail("--residency", "value", "expected either --cache or --residency, not both");
  if (r.cache < 0) fail("--cache", "value", "expected >= 0, found {}", r.cache);
  if (!(r.residency >= 0.0 && r.residency <= 1.0))
    fail("--residency", "value", "expected a fraction in (0, 1], found {}", r.residency);
  if (spec.layers == 0) return 0;  // a dense model has no expert cache
  if (r.cache > 0) return r.cache;
  if (r.residency > 0) {
    const int c = static_cast<int>(std::lround(r.residency * spec.experts));
    const int clamped = std::clamp(c, spec.top_k, spec.experts);
    // Said once per process (a bench or sweep resolves it per configuration).
    static std::atomic<bool> said{false};
    if (clamped != c && !said.exchange(true))
      std::fprintf(stderr,
                   "steermoe: note: --residency %g is %d of %d experts per layer; the cache holds "
                   "at least the top-k: %d\n",
                   r.residency, c, spec.experts, clamped);
    return clamped;
  }
  return spec.experts;
}

// Exact routing with the LRU clock needs nothing calibrated, nor does a cache of every expert;
// everything else uses the warm set, the score range or the token prior.
bool needs_calibration(const policy::PolicyConfig& p, int cache, const policy::RouterSpec& spec) {
  if (spec.layers == 0 || cache >= spec.experts) return false;
  return !(p.kind == policy::PolicyKind::kExact && p.evict == policy::Evict::kLru);
}

}  // namespace

OffloadConfig::OffloadConfig() = default;

OffloadRequest OffloadConfig::request() const {
  return {.policy = policy_text(),
          .cache = cache_slots,
          .link = link.text,
          .max_inflight = max_inflight,
          .pacing = pacing_name(pacing),
          .issue = issue_name(issue),
          .moe_wait = moe_wait_name(moe_wait),
          .spec_select = block      ? policy::block_rule_name(block->rule)
                         : rollback ? "rollback"
                                    : "",
          .pool = block ? block->pool : 0,
          .union_slots = block ? block->union_slots : 0,
          .draft_k = draft_k,
          .block_prefetch = block ? block->prefetch_next : true,
          .verify = verify,
          .calibration = calibration_source.empty() ? nullptr : calibration,
          .calibration_source = calibration_source};
}

PrefetchPacing parse_pacing(const std::string& text) {
  if (text == "fifo") return PrefetchPacing::kFifo;
  if (text == "defer") return PrefetchPacing::kDefer;
  if (text == "demand") return PrefetchPacing::kDemand;
  fail("--prefetch-pacing", "value", "expected fifo, defer or demand, found '{}'", text);
}

const char* pacing_name(PrefetchPacing pacing) {
  switch (pacing) {
    case PrefetchPacing::kFifo:
      return "fifo";
    case PrefetchPacing::kDefer:
      return "defer";
    case PrefetchPacing::kDemand:
      return "demand";
  }
  return "fifo";
}

PrefetchIssue parse_issue(const std::string& text) {
  if (text == "boundary") return PrefetchIssue::kBoundary;
  if (text == "early") return PrefetchIssue::kEarly;
  fail("--prefetch-issue", "value", "expected boundary or early, found '{}'", text);
}

const char* issue_name(PrefetchIssue issue) {
  return issue == PrefetchIssue::kEarly ? "early" : "boundary";
}

MoeWait parse_moe_wait(const std::string& text) {
  if (text == "all") return MoeWait::kAll;
  if (text == "ready") return MoeWait::kReady;
  fail("--moe-wait", "value", "expected all or ready, found '{}'", text);
}

const char* moe_wait_name(MoeWait wait) {
  return wait == MoeWait::kReady ? "ready" : "all";
}

OffloadConfig resolve_offload(const OffloadRequest& r, const ModelFacts& model) {
  const policy::RouterSpec& spec = model.spec;
  const bool dense = spec.layers == 0;
  OffloadConfig c;
  c.policy = policy::parse_policy(r.policy);
  c.cache_slots = resolve_cache(r, spec);
  policy::validate(c.policy, spec, c.cache_slots);
  c.link = link::parse_link_spec(dense ? "resident" : r.link);
  // The demonstration mode routes on the copies the scheduler issued: without copies (the
  // resident link) there is nothing to route on.
  if (c.policy.physical && !dense && !c.link.moves_experts())
    fail("--policy", "physical",
         "expected a link that copies experts (--link disk | emulated:GBPS | sim:PROFILE) for "
         "'{}': the physical: demonstration mode routes on the copies the scheduler issued "
         "(or run it in `steermoe sim`)",
         r.policy);
  if (r.max_inflight < 1 || r.max_inflight > 1024)
    fail("engine", "--max-inflight", "expected 1..1024, found {}", r.max_inflight);
  c.max_inflight = r.max_inflight;
  c.pacing = parse_pacing(r.pacing);
  c.issue = parse_issue(r.issue);
  c.moe_wait = parse_moe_wait(r.moe_wait);
  if (r.spec_select == "rollback" && !dense) {
    c.rollback = true;  // on every link: restored slots are copied again (OffloadStep::rollback)
  } else if (!r.spec_select.empty() && !dense) {
    const policy::BlockRule rule = policy::parse_block_rule(r.spec_select);
    c.block = policy::BlockParams{.rule = rule,
                                  .pool = r.pool > 0 ? r.pool : c.cache_slots,
                                  .union_slots = r.union_slots > 0 ? r.union_slots : c.cache_slots,
                                  .gamma = rule == policy::BlockRule::kBlockConf ? 1.05f : 1.0f,
                                  .prefetch_next = r.block_prefetch};
    // The selector's check, here before any file is read or probed.
    policy::validate(*c.block, spec);
    const int E = spec.experts, K = spec.top_k;
    if (r.draft_k < 0) fail("--draft-k", "value", "expected >= 1, found {}", r.draft_k);
    c.draft_k = r.draft_k;
    const int pu = c.block->pool + c.block->union_slots;
    const int most = rule == policy::BlockRule::kExact       ? (r.draft_k + 1) * K
                     : rule == policy::BlockRule::kBlockConf ? pu + r.draft_k
                                                             : pu;
    c.block_slots = std::min(E, std::max(pu, most));
  }
  c.verify = r.verify;
  if (r.calibration != nullptr && !dense) {
    policy::check_calibration_shape(
        *r.calibration, spec, r.calibration_source.empty() ? "calibration" : r.calibration_source,
        "layers/experts/top_k", "the model's");
    c.calibration = r.calibration;
    c.calibration_source = r.calibration_source;
  } else {
    if (needs_calibration(c.policy, c.cache_slots, spec))
      fail("--calib", "calibration",
           "policy '{}' at {} of {} experts needs a calibration (warm set, score range, token "
           "prior): give --calib FILE.smcal (make one with `steermoe trace` + `steermoe "
           "calibrate`); {}",
           r.policy, c.cache_slots, spec.experts,
           r.calibration_hint.empty() ? "none found beside " + model.name : r.calibration_hint);
    c.calibration =
        std::make_shared<const policy::Calibration>(policy::uninformed_calibration(spec));
  }
  return c;
}

}  // namespace steermoe::schedule
