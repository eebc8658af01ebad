#include "engine/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "engine/cpu/cpu_backend.hpp"
#include "engine/cuda_backend_factory.hpp"

namespace steermoe::engine {

void RoutingRecord::clear() {
  tokens.clear();
  scores.clear();
  pregate.clear();
  weight_scores.clear();
  selected.clear();
  weights.clear();
  sequence_starts.clear();
}

policy::RouterSpec router_spec(const model::ModelConfig& c) {
  policy::RouterSpec s;
  s.experts = c.experts;
  s.top_k = c.top_k;
  s.layers = c.moe_layer_count();
  s.mode = c.router == model::RouterScore::kSigmoid ? policy::ScoreMode::kSigmoid
                                                    : policy::ScoreMode::kSoftmax;
  s.n_group = c.n_group;
  s.topk_group = c.topk_group;
  s.norm_topk_prob = c.norm_topk_prob;
  s.routed_scaling_factor = c.routed_scaling_factor;
  s.default_window = c.family == model::Family::kDeepseekV3 ? 4 : 8;
  return s;
}

Engine::Engine(const model::Model& model, const EngineParams& params)
    : model_(model), cfg_(model.config()), params_(params), spec_(engine::router_spec(cfg_)) {
  if (params.threads < 1 || params.threads > 1024) {
    fail("engine", "threads", "expected 1..1024, found {}", params.threads);
  }
  if (params.max_batch < 1 || params.max_batch > 4096) {
    fail("engine", "max_batch", "expected 1..4096, found {}", params.max_batch);
  }
  context_ = params.context > 0 ? params.context : std::min(cfg_.max_positions, 4096);
  if (context_ < 1 || context_ > (1 << 22)) {
    fail("engine", "context", "expected 1..4194304 positions, found {}", context_);
  }

  // Routing: the policy, the cache size and the calibration must fit the model. A dense model
  // (no MoE layer) routes nothing: the policy is still parsed (a typo stays an error), but the
  // cache size, the calibration and the link are no-ops there, so that the default options of
  // every command (and a calibration of another model) run it unchanged.
  const bool dense = !cfg_.has_moe();
  const policy::PolicyConfig config = policy::parse_policy(params.policy);
  slots_ = dense ? 0 : params.cache_slots > 0 ? params.cache_slots : spec_.experts;
  policy::validate(config, spec_, slots_);
  const policy::Calibration* calibration = dense ? nullptr : params.calibration;
  if (calibration != nullptr &&
      (calibration->layers != spec_.layers || calibration->experts != spec_.experts ||
       calibration->top_k != spec_.top_k)) {
    fail("calibration", "shape",
         "expected {} MoE layers x {} experts, top-{} (the model's), found {} x {}, top-{}",
         spec_.layers, spec_.experts, spec_.top_k, calibration->layers, calibration->experts,
         calibration->top_k);
  }
  calibration_ = calibration != nullptr ? *calibration : policy::uninformed_calibration(spec_);
  if (params.max_inflight < 1 || params.max_inflight > 1024) {
    fail("engine", "--max-inflight", "expected 1..1024, found {}", params.max_inflight);
  }
  // No expert to move: a dense model's experts are "resident" whatever --link says.
  offload_ =
      std::make_unique<Offload>(model_,
                                LinkOptions{.spec = dense ? "resident" : params.link,
                                            .verify = params.verify,
                                            .test_copy_delay_max_s = params.test_copy_delay_max_s,
                                            .test_copy_delay_seed = params.test_copy_delay_seed},
                                slots_);
  step_ = std::make_unique<schedule::OffloadStep>(
      spec_, config, calibration_,
      schedule::OffloadParams{.cache_slots = slots_,
                              .max_inflight = params.max_inflight,
                              .expert_bytes = offload_->expert_bytes()},
      offload_->link());
  if (offload_->simulated_clock() != nullptr)
    step_->simulate_compute(offload_->simulated_clock(), offload_->profile());
  offload_->attach(step_->scheduler());
  const bool device_link = offload_->kind() == LinkKind::kCuda;
  if (device_link && params.backend != "cuda")
    fail("engine", "--link", "expected --backend cuda with --link cuda, found --backend {}",
         params.backend);
  if (params.backend == "cuda") {
    const bool resident = offload_->store().all_resident();
    backend_ = make_cuda_backend(model_, CudaBackendParams{.context = context_,
                                                           .max_batch = params.max_batch,
                                                           .upload_experts = resident,
                                                           .experts_on_device = device_link,
                                                           .cache_slots = slots_,
                                                           .quiet = params.quiet});
  } else if (params.backend == "cpu") {
    backend_ = std::make_unique<CpuBackend>(
        model_, CpuBackendParams{
                    .threads = params.threads, .context = context_, .max_batch = params.max_batch});
  } else {
    fail("engine", "--backend", "expected cpu or cuda, found '{}'", params.backend);
  }

  moe_index_ = cfg_.moe_index();
  next_moe_layer_.assign(static_cast<size_t>(cfg_.layers), -1);
  for (int l = cfg_.layers - 2; l >= 0; --l) {
    const int nxt = l + 1;
    next_moe_layer_[static_cast<size_t>(l)] =
        cfg_.moe_layer[static_cast<size_t>(nxt)] ? nxt : next_moe_layer_[static_cast<size_t>(nxt)];
  }
  const auto B = static_cast<size_t>(params.max_batch);
  pre_cur_.assign(B * static_cast<size_t>(cfg_.experts), 0.0f);
  calls_.resize(B * static_cast<size_t>(cfg_.top_k));
  if (params.score_source != nullptr) {
    if (cfg_.router != model::RouterScore::kSoftmax)
      fail("engine", "score source", "expected a softmax-router model (OLMoE, Qwen3-MoE)");
    supplied_z_.resize(B * static_cast<size_t>(cfg_.experts));
    supplied_pre_.resize(B * static_cast<size_t>(cfg_.experts));
  }
  want_pregate_ = step_->prefetches();
  step_->begin_request();
}

Engine::~Engine() = default;

void Engine::reset() {
  pos_ = 0;
  step_->begin_request();
}

void Engine::set_recorder(RoutingRecord* record) {
  record_ = record;
  want_pregate_ = step_->prefetches() || record != nullptr;
  if (record_ != nullptr) {
    record_->moe_layers = cfg_.moe_layer_count();
    record_->experts = cfg_.experts;
    record_->top_k = cfg_.top_k;
    record_->sigmoid = cfg_.router == model::RouterScore::kSigmoid;
  }
}

void Engine::check_token(int32_t token) const {
  if (token < 0 || token >= cfg_.vocab) {
    fail("engine", "token", "expected a token id in [0, {}), found {}", cfg_.vocab, token);
  }
}

std::span<const float> Engine::decode(int32_t token) {
  forward(std::span<const int32_t>(&token, 1), {});
  return backend_->logits();
}

std::span<const float> Engine::prefill(std::span<const int32_t> tokens,
                                       std::span<float> all_logits) {
  const auto V = static_cast<size_t>(cfg_.vocab);
  if (!all_logits.empty() && all_logits.size() != tokens.size() * V) {
    fail("engine", "prefill", "logits buffer of {} floats, expected {}", all_logits.size(),
         tokens.size() * V);
  }
  // Batches of max_batch tokens when every expert is addressable at once; with offloaded
  // experts the prompt goes token by token (the decisions are the same either way, and each
  // token's experts must be in the cache when its MoE runs).
  const size_t B = offload_->store().all_resident() && !step_->offloaded()
                       ? static_cast<size_t>(params_.max_batch)
                       : 1;
  for (size_t begin = 0; begin < tokens.size(); begin += B) {
    const size_t n = std::min(B, tokens.size() - begin);
    forward(tokens.subspan(begin, n),
            all_logits.empty() ? std::span<float>() : all_logits.subspan(begin * V, n * V));
  }
  return backend_->logits();
}

// The one forward loop. n == 1 is the decode step in the timing model's order (A(l), H(l),
// wait, M(l)); n > 1 is a batched prefill whose routing runs layer-major, which makes the same
// decisions because each layer's policy state depends only on that layer's history.
void Engine::forward(std::span<const int32_t> tokens, std::span<float> all_logits) {
  const int n = static_cast<int>(tokens.size());
  SM_ASSERT(n >= 1 && n <= params_.max_batch);
  for (int32_t t : tokens) check_token(t);
  if (pos_ + n > context_) {
    fail("engine", "context", "{} positions used + {} new tokens exceed the context of {} (-c)",
         pos_, n, context_);
  }
  if (record_ != nullptr) {
    if (pos_ == 0) record_->sequence_starts.push_back(static_cast<int64_t>(record_->steps()));
    record_base_ = record_->steps();
    const size_t steps = record_base_ + static_cast<size_t>(n);
    const size_t le = static_cast<size_t>(record_->moe_layers) * static_cast<size_t>(cfg_.experts);
    const size_t lk = static_cast<size_t>(record_->moe_layers) * static_cast<size_t>(cfg_.top_k);
    record_->tokens.insert(record_->tokens.end(), tokens.begin(), tokens.end());
    record_->scores.resize(steps * le);
    record_->pregate.resize(steps * le, 0.0f);
    if (record_->sigmoid) record_->weight_scores.resize(steps * le);
    record_->selected.resize(steps * lk);
    record_->weights.resize(steps * lk);
  }
  const bool token_major = n == 1;
  if (token_major) step_->begin_token(tokens[0]);
  backend_->embed(tokens);
  std::fill(pre_cur_.begin(), pre_cur_.end(), 0.0f);
  pre_cur_valid_ = false;
  const size_t rows = static_cast<size_t>(n) * static_cast<size_t>(cfg_.experts);

  for (int l = 0; l < cfg_.layers; ++l) {
    const int m = moe_index_[static_cast<size_t>(l)];
    if (m < 0) {
      backend_->attention(l, n, pos_);
      backend_->dense_ffn(l, n);
      continue;
    }
    if (token_major) step_->begin_layer(m);
    backend_->attention(l, n, pos_);
    const int next = want_pregate_ ? next_moe_layer_[static_cast<size_t>(l)] : -1;
    RouterScores scores = backend_->router(l, next, n);
    if (params_.score_source != nullptr) scores = supplied_scores(m, next >= 0, n);
    route_tokens(l, m, tokens, scores);
    if (token_major) step_->wait(m);
    // Only after the wait: the store hands out an expert once its slot's copy has completed.
    const std::span<ExpertCall> calls(calls_.data(), static_cast<size_t>(n * cfg_.top_k));
    for (ExpertCall& call : calls)
      call.weights = &offload_->store().expert(m, l, call.expert, call.slot);
    backend_->moe(l, n, calls);
    if (token_major) step_->end_layer(m);
    // The next MoE layer's pre-gate (zero, and not used for part 1, when there is none).
    pre_cur_valid_ = !scores.pregate_next.empty();
    if (pre_cur_valid_) {
      std::copy_n(scores.pregate_next.begin(), rows, pre_cur_.begin());
    } else {
      std::fill_n(pre_cur_.begin(), rows, 0.0f);
    }
  }
  backend_->head(n, all_logits);
  if (token_major) step_->end_token();
  counters_.tokens += n;
  pos_ += n;
}

// The score source's rows for MoE layer m (softmax: the weight scores are z).
RouterScores Engine::supplied_scores(int m, bool want_pregate, int n) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const size_t rows = static_cast<size_t>(n) * E;
  bool have_pregate = want_pregate;
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * E;
    const bool pre = params_.score_source->scores(pos_ + t, m, {&supplied_z_[off], E},
                                                  {&supplied_pre_[off], E});
    have_pregate = have_pregate && pre;
  }
  const std::span<const float> z(supplied_z_.data(), rows);
  return {.z = z,
          .weight_scores = z,
          .pregate_next = have_pregate ? std::span<const float>(supplied_pre_.data(), rows)
                                       : std::span<const float>{}};
}

// The policy step of MoE layer `m` for each token, and the expert calls it gives.
void Engine::route_tokens(int /*layer*/, int m, std::span<const int32_t> tokens,
                          const RouterScores& scores) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto K = static_cast<size_t>(cfg_.top_k);
  const bool token_major = tokens.size() == 1;
  const bool prefetch = step_->prefetches() && m >= 1 && pre_cur_valid_;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const size_t off = t * E;
    const std::span<const float> z = scores.z.subspan(off, E);
    const std::span<const float> ws = scores.weight_scores.subspan(off, E);
    const policy::Decision& d =
        token_major
            ? step_->host(m, z, ws,
                          scores.pregate_next.empty() ? std::span<const float>{}
                                                      : scores.pregate_next.subspan(off, E))
            : step_->route_layer_major(m, tokens[t],
                                       prefetch ? std::span<const float>(&pre_cur_[off], E)
                                                : std::span<const float>{},
                                       z, ws);
    SM_ASSERT(d.selected.size() == K && d.weights.size() == K);
    counters_.layer_steps += 1;
    counters_.replaced += d.replaced;
    counters_.demand += static_cast<int64_t>(d.demand.size());
    counters_.prefetch += static_cast<int64_t>(d.prefetch.size());
    for (size_t i = 0; i < K; ++i) {
      calls_[t * K + i] = {.weights = nullptr,
                           .expert = d.selected[i],
                           .slot = d.selected_slot[i],
                           .weight = d.weights[i]};
    }
    if (record_ != nullptr) record_rows(m, static_cast<int>(t), d, scores);
  }
}

void Engine::record_rows(int m, int t, const policy::Decision& d, const RouterScores& scores) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto K = static_cast<size_t>(cfg_.top_k);
  const auto L = static_cast<size_t>(cfg_.moe_layer_count());
  const size_t off = static_cast<size_t>(t) * E;
  const size_t step = record_base_ + static_cast<size_t>(t);
  const size_t row = step * L + static_cast<size_t>(m);
  std::copy_n(&scores.z[off], E, &record_->scores[row * E]);
  std::copy_n(&pre_cur_[off], E, &record_->pregate[row * E]);
  if (record_->sigmoid) std::copy_n(&scores.weight_scores[off], E, &record_->weight_scores[row * E]);
  std::copy(d.selected.begin(), d.selected.end(), &record_->selected[row * K]);
  std::copy(d.weights.begin(), d.weights.end(), &record_->weights[row * K]);
}

}  // namespace steermoe::engine
