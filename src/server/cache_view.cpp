#include "server/cache_view.hpp"

#include "policy/router.hpp"

namespace steermoe::server {

CacheView snapshot_cache(const engine::Engine& engine, int64_t version) {
  CacheView v;
  v.version = version;
  v.moe = engine.config().has_moe();
  if (!v.moe) return v;
  const engine::ExpertCache& cache = engine.expert_cache();
  const policy::RequestRouter& router = cache.router();
  v.policy = engine.policy().to_string();
  v.cache_slots = cache.cache_slots();
  v.experts = router.spec().experts;
  v.top_k = router.spec().top_k;
  v.step = router.step(0);
  for (int l = 0; l < router.spec().layers; ++l) {
    CacheView::Layer layer;
    layer.resident = router.cache(l).resident_sorted();
    const policy::Decision& d = router.decision(l);
    layer.selected = d.selected;
    for (const policy::Copy& c : d.demand) layer.demand.push_back(c.expert);
    for (const policy::Copy& c : d.prefetch) layer.prefetch.push_back(c.expert);
    v.layers.push_back(std::move(layer));
  }
  v.last_token = cache.last_token();
  v.request = cache.request();
  return v;
}

json cache_view_json(const CacheView& v) {
  if (!v.moe) return {{"version", v.version}, {"moe", false}};
  json layers = json::array();
  for (const CacheView::Layer& l : v.layers) {
    layers.push_back({{"resident", l.resident},
                      {"selected", l.selected},
                      {"demand", l.demand},
                      {"prefetch", l.prefetch}});
  }
  const engine::CacheStats& r = v.request;
  const double tokens = static_cast<double>(std::max<int64_t>(r.tokens, 1));
  const engine::CacheStats& t = v.last_token;
  return {{"version", v.version},
          {"moe", true},
          {"policy", v.policy},
          {"cache", v.cache_slots},
          {"experts", v.experts},
          {"top_k", v.top_k},
          {"step", v.step},
          {"physical", r.physical},
          {"layers", layers},
          {"last_token",
           {{"demand", t.demand_copies()},
            {"prefetch", t.prefetch_copies()},
            {"prefetch_in_time", t.prefetch_in_time},
            {"prefetch_late", t.prefetch_late},
            {"stall_ms", t.stall_s * 1e3}}},
          {"request",
           {{"tokens", r.tokens},
            {"routed_tokens", r.routed_tokens},
            {"demand", r.demand_copies()},
            {"prefetch", r.prefetch_copies()},
            {"prefetch_late", r.prefetch_late},
            {"demand_per_token", static_cast<double>(r.demand) / tokens},
            {"prefetch_per_token", static_cast<double>(r.prefetch) / tokens},
            {"stall_ms_per_token", r.stall_s * 1e3 / tokens}}}};
}

}  // namespace steermoe::server
