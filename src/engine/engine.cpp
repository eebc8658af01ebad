#include "engine/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "common/interrupt.hpp"
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

schedule::OffloadConfig resolve_offload(const model::Model& model,
                                        const schedule::OffloadRequest& request) {
  return schedule::resolve_offload(request, model_facts(model));
}

Engine::Engine(const model::Model& model, const EngineParams& params)
    : model_(model), cfg_(model.config()), params_(params), spec_(engine::router_spec(cfg_)) {
  if (params.threads < 1 || params.threads > 1024) {
    fail("engine", "threads", "expected 1..1024, found {}", params.threads);
  }
  if (params.max_batch < 1 || params.max_batch > 4096) {
    fail("engine", "max_batch", "expected 1..4096, found {}", params.max_batch);
  }
  // The non-expert weights into 2 MiB pages, now that the command checked its memory budget
  // against the model (once per model, whatever the number of engines over it).
  model.prepare_for_compute();
  context_ = resolve_context(cfg_, params.context);
  if (context_ < 1 || context_ > (1 << 22)) {
    fail("engine", "context", "expected 1..4194304 positions, found {}", context_);
  }
  // A default-constructed configuration (no calibration: never the output of resolve_offload)
  // stands for the default request: exact LRU routing, every expert resident.
  if (params_.offload.calibration == nullptr)
    params_.offload = resolve_offload(model_, schedule::OffloadRequest{});
  const schedule::OffloadConfig& offload = params_.offload;
  SM_ASSERT_MSG(cfg_.has_moe()
                    ? offload.cache_slots >= spec_.top_k && offload.cache_slots <= spec_.experts
                    : offload.cache_slots == 0,
                "offload configuration resolved for another model");
  cache_ = std::make_unique<ExpertCache>(
      model_, offload,
      ExpertCacheParams{.max_positions = params.max_batch,
                        .test_copy_delay_max_s = params.test_copy_delay_max_s,
                        .test_copy_delay_seed = params.test_copy_delay_seed});
  const bool device_link = cache_->kind() == LinkKind::kCuda;
  if (device_link && params.backend != "cuda")
    fail("engine", "--link", "expected --backend cuda with --link cuda, found --backend {}",
         params.backend);
  if (params.backend == "cuda" && params.gdn_prefill != DeltaRulePrefill::kRecurrent)
    fail("engine", "--gdn-prefill", "expected recurrent with --backend cuda, found chunked");
  if (params.backend == "cuda") {
    backend_ =
        make_cuda_backend(model_, CudaBackendParams{.context = context_,
                                                    .max_batch = params.max_batch,
                                                    .upload_experts = cache_->experts_in_place(),
                                                    .experts_on_device = device_link,
                                                    .cache_slots = offload.cache_slots,
                                                    .quiet = params.quiet});
  } else if (params.backend == "cpu") {
    backend_ =
        std::make_unique<CpuBackend>(model_, CpuBackendParams{.threads = params.threads,
                                                              .context = context_,
                                                              .max_batch = params.max_batch,
                                                              .gdn_prefill = params.gdn_prefill});
  } else {
    fail("engine", "--backend", "expected cpu or cuda, found '{}'", params.backend);
  }

  for (int l = 0; l < cfg_.layers; ++l)
    if (cfg_.moe_layer[static_cast<size_t>(l)]) moe_layers_.push_back(l);
  next_moe_layer_.assign(static_cast<size_t>(cfg_.layers), -1);
  for (int l = cfg_.layers - 2; l >= 0; --l) {
    const int nxt = l + 1;
    next_moe_layer_[static_cast<size_t>(l)] =
        cfg_.moe_layer[static_cast<size_t>(nxt)] ? nxt : next_moe_layer_[static_cast<size_t>(nxt)];
  }
  const auto B = static_cast<size_t>(params.max_batch);
  calls_.resize(B * static_cast<size_t>(cfg_.top_k));
  if (params.score_source != nullptr) {
    if (cfg_.router != model::RouterScore::kSoftmax && !params.score_source->has_weight_scores())
      fail("engine", "score source",
           "expected weight scores for this sigmoid-router model (a trace recorded from one has "
           "weights_scores.npy)");
    supplied_z_.resize(B * static_cast<size_t>(cfg_.experts));
    if (cfg_.router != model::RouterScore::kSoftmax)
      supplied_w_.resize(B * static_cast<size_t>(cfg_.experts));
    supplied_pre_.resize(B * static_cast<size_t>(cfg_.experts));
  }
  want_pregate_ = cache_->wants_pregate();
}

Engine::~Engine() = default;

void Engine::release_kv_beyond(int positions) {
  kv_high_ = std::max(kv_high_, pos_);
  positions = std::max(positions, pos_);
  if (kv_high_ <= positions) return;
  backend_->release_kv(positions);
  kv_high_ = positions;
}

void Engine::end_sequence(int keep_positions) {
  kv_high_ = std::max(kv_high_, pos_);
  pos_ = 0;
  mark_pos_ = -1;
  ended_ = true;
  release_kv_beyond(keep_positions);
}

void Engine::reset() {
  kv_high_ = std::max(kv_high_, pos_);
  ended_ = false;
  pos_ = 0;
  mark_pos_ = -1;
  cache_->begin_request();
}

void Engine::rollback(int position) {
  if (position < 0 || position > pos_)
    fail("engine", "rollback", "expected a position in [0, {}], found {}", pos_, position);
  if (cfg_.linear_layer_count() > 0 && position < pos_)
    fail(cfg_.source, "rollback",
         "expected a model without recurrent (Gated DeltaNet) layers: their state cannot be "
         "rewound to an earlier position");
  if (mark_pos_ >= 0) {
    if (position < mark_pos_)
      fail("engine", "rollback", "expected a position >= {} (the mark), found {}", mark_pos_,
           position);
    cache_->rollback(position - mark_pos_);
    mark_pos_ = -1;
  }
  kv_high_ = std::max(kv_high_, pos_);  // the positions rolled back were written
  pos_ = position;
}

void Engine::mark_rollback(int positions) {
  SM_ASSERT_MSG(rolls_back_routing(), "mark_rollback() needs --spec-select rollback");
  cache_->mark_rollback(positions);
  mark_pos_ = pos_;
}

void Engine::set_recorder(RoutingRecord* record) {
  record_ = record;
  want_pregate_ = cache_->wants_pregate() || record != nullptr;
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
  const auto B = static_cast<size_t>(prefill_step_tokens());
  for (size_t begin = 0; begin < tokens.size(); begin += B) {
    const size_t n = std::min(B, tokens.size() - begin);
    forward(tokens.subspan(begin, n),
            all_logits.empty() ? std::span<float>() : all_logits.subspan(begin * V, n * V));
  }
  return backend_->logits();
}

// One forward pass of n tokens: the expert cache's step runs the layers through this engine's
// driver methods below. n == 1 is the decode step in the timing model's order (A(l), H(l), wait,
// M(l)); n > 1 is a batched prefill routed layer-major.
void Engine::verify(std::span<const int32_t> tokens, std::span<const float> alpha,
                    std::span<float> all_logits) {
  SM_ASSERT_MSG(verifies_in_blocks(), "verify() needs --spec-select (EngineParams::offload.block)");
  if (alpha.size() != tokens.size() || tokens.empty() ||
      static_cast<int>(tokens.size()) > params_.max_batch)
    fail("engine", "verify", "expected 1..{} tokens with one weight each, found {} and {}",
         params_.max_batch, tokens.size(), alpha.size());
  if (all_logits.size() != tokens.size() * static_cast<size_t>(cfg_.vocab))
    fail("engine", "verify", "logits buffer of {} floats, expected {}", all_logits.size(),
         tokens.size() * static_cast<size_t>(cfg_.vocab));
  forward(tokens, all_logits, alpha);
}

void Engine::forward(std::span<const int32_t> tokens, std::span<float> all_logits,
                     std::span<const float> block_alpha) {
  // Ctrl-C: every command that computes (run, bench, kl, score, logits, profile, ...) stops
  // before its next forward pass with status 130, not after its last. Only the CLI's handler
  // sets the flag (serve and the Python module keep their own), so nothing else sees it.
  check_interrupt();
  if (ended_)
    fail("engine", "forward", "expected reset() after end_sequence(): the sequence is over");
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
  n_ = n;
  next_layer_ = 0;
  all_logits_ = all_logits;
  backend_->embed(tokens);
  if (!block_alpha.empty()) {
    cache_->run_block(tokens, block_alpha, *this);
  } else if (n == 1) {
    cache_->run_token(tokens[0], *this);
  } else {
    cache_->run_layer_major(tokens, *this);
  }
  pos_ += n;
}

// Dense (non-MoE) layers from the next one to run up to `until` (exclusive).
void Engine::run_dense_layers(int until) {
  for (; next_layer_ < until; ++next_layer_) {
    backend_->attention(next_layer_, n_, pos_);
    backend_->dense_ffn(next_layer_, n_);
  }
}

schedule::LayerScores Engine::scores(int m) {
  const int layer = moe_layers_[static_cast<size_t>(m)];
  run_dense_layers(layer);
  backend_->attention(layer, n_, pos_);
  next_layer_ = layer + 1;
  const int next = want_pregate_ ? next_moe_layer_[static_cast<size_t>(layer)] : -1;
  current_ = backend_->router(layer, next, n_);
  if (params_.score_source != nullptr) current_ = supplied_scores(m, next >= 0, n_);
  return {.z = current_.z,
          .weight_scores = current_.weight_scores,
          .pregate_next = current_.pregate_next};
}

void Engine::routed(int m, int t, const policy::Decision& d, std::span<const float> pregate) {
  const auto K = static_cast<size_t>(cfg_.top_k);
  SM_ASSERT(d.selected.size() == K && d.weights.size() == K);
  for (size_t i = 0; i < K; ++i) {
    calls_[static_cast<size_t>(t) * K + i] = {.weights = nullptr,
                                              .expert = d.selected[i],
                                              .slot = d.selected_slot[i],
                                              .weight = d.weights[i]};
  }
  if (record_ != nullptr) record_rows(m, t, d, pregate);
}

void Engine::moe(int m) {
  const int layer = moe_layers_[static_cast<size_t>(m)];
  // Called after the step's wait: the cache hands out an expert once its slot's copy completed.
  const std::span<ExpertCall> calls(calls_.data(), static_cast<size_t>(n_ * cfg_.top_k));
  for (ExpertCall& call : calls) call.weights = &cache_->expert(m, layer, call.expert, call.slot);
  backend_->moe(layer, n_, calls);
}

void Engine::moe_part(int m, std::span<const int32_t> picks, bool first, bool last) {
  SM_ASSERT(n_ == 1);  // decode: the step splits only run_token's MoE
  const int layer = moe_layers_[static_cast<size_t>(m)];
  const std::span<ExpertCall> calls(calls_.data(), static_cast<size_t>(cfg_.top_k));
  // Only the picked experts' copies are known to have completed: the cache refuses any other.
  for (const int32_t i : picks) {
    ExpertCall& call = calls[static_cast<size_t>(i)];
    call.weights = &cache_->expert(m, layer, call.expert, call.slot);
  }
  backend_->moe_part(layer, calls, picks, first, last);
}

void Engine::finish() {
  run_dense_layers(cfg_.layers);
  backend_->head(n_, all_logits_);
}

// The score source's rows for MoE layer m (softmax: the weight scores are z).
RouterScores Engine::supplied_scores(int m, bool want_pregate, int n) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const size_t rows = static_cast<size_t>(n) * E;
  bool have_pregate = want_pregate;
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * E;
    const bool pre =
        params_.score_source->scores(pos_ + t, m, {&supplied_z_[off], E}, {&supplied_pre_[off], E});
    have_pregate = have_pregate && pre;
    if (!supplied_w_.empty())
      params_.score_source->weight_scores(pos_ + t, m, {&supplied_w_[off], E});
  }
  const std::span<const float> z(supplied_z_.data(), rows);
  return {
      .z = z,
      .weight_scores = supplied_w_.empty() ? z : std::span<const float>(supplied_w_.data(), rows),
      .pregate_next = have_pregate ? std::span<const float>(supplied_pre_.data(), rows)
                                   : std::span<const float>{}};
}

void Engine::record_rows(int m, int t, const policy::Decision& d, std::span<const float> pregate) {
  const auto E = static_cast<size_t>(cfg_.experts);
  const auto K = static_cast<size_t>(cfg_.top_k);
  const auto L = static_cast<size_t>(cfg_.moe_layer_count());
  const size_t off = static_cast<size_t>(t) * E;
  const size_t step = record_base_ + static_cast<size_t>(t);
  const size_t row = step * L + static_cast<size_t>(m);
  std::copy_n(&current_.z[off], E, &record_->scores[row * E]);
  // No pre-gate for this layer (layer 0, or none computed): the row stays zero.
  if (!pregate.empty()) std::copy_n(pregate.begin(), E, &record_->pregate[row * E]);
  if (record_->sigmoid)
    std::copy_n(&current_.weight_scores[off], E, &record_->weight_scores[row * E]);
  std::copy(d.selected.begin(), d.selected.end(), &record_->selected[row * K]);
  std::copy(d.weights.begin(), d.weights.end(), &record_->weights[row * K]);
}

}  // namespace steermoe::engine
