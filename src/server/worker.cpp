#include "server/worker.hpp"

#include <chrono>
#include <cstdint>

#include "common/error.hpp"
#include "common/memory_limit.hpp"
#include "engine/memory_plan.hpp"

namespace steermoe::server {

Worker::Worker(const model::Model& model, const tokenizer::Tokenizer& tok,
               const WorkerOptions& options)
    : model_(model), tok_(tok), options_(options) {
  default_policy_ = options_.engine.offload.policy_text();
  default_engine_ = std::make_unique<engine::Engine>(model_, options_.engine);
  context_ = default_engine_->context();
  view_ = snapshot_cache(*default_engine_, 0);  // the warm set, before any request
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() {
  stop();
}

void Worker::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    for (auto& request : queue_)
      for (auto& job : request) job->cancelled = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Worker::drain() {
  std::vector<std::shared_ptr<Job>> shed;
  {
    std::lock_guard lock(mu_);
    draining_ = true;
    for (auto& request : queue_)
      for (auto& job : request) shed.push_back(job);
    queue_.clear();
  }
  for (auto& job : shed) {
    {
      std::lock_guard lock(job->mu);
      job->error = "the server is shutting down; the request did not start (retry elsewhere)";
      job->unavailable = true;
      job->done = true;
    }
    job->notify();
  }
}

bool Worker::draining() const {
  std::lock_guard lock(mu_);
  return draining_;
}

bool Worker::idle() const {
  std::lock_guard lock(mu_);
  return queue_.empty() && !running_job_;
}

namespace {

// KV positions an engine keeps committed between requests: re-touching them costs page faults
// (zero-filled), small next to a long request's decode, while a server whose -c is large would
// otherwise hold its longest request's KV (a 12000-token request: +100 MB RSS until exit).
constexpr int kKeptKvPositions = 1024;

// The server's configuration with a request's policy and cache size in place of its own.
schedule::OffloadRequest variant(const schedule::OffloadConfig& defaults, const std::string& policy,
                                 int cache_slots) {
  schedule::OffloadRequest r = defaults.request();
  if (!policy.empty()) r.policy = policy;
  if (cache_slots >= 0) r.cache = cache_slots;
  return r;
}

}  // namespace

std::string Worker::check_policy(const std::string& policy, int cache_slots) const {
  const schedule::OffloadConfig offload =
      engine::resolve_offload(model_, variant(options_.engine.offload, policy, cache_slots));
  const bool own_engine = offload.policy_text() != default_policy_ ||
                          offload.cache_slots != options_.engine.offload.cache_slots;
  if (own_engine && options_.memory_room != UINT64_MAX) {
    // Its slots and KV cache come on top of the default engine's (the weights are shared).
    const engine::MemoryPlan plan = engine::plan_memory(model_, offload, context_);
    const uint64_t need = plan.slot_bytes + plan.kv_bytes;
    if (need > options_.memory_room)
      fail("request", "steermoe",
           "expected a policy and cache that --mem-limit holds beside the server's own engine: "
           "{} at cache {} runs on a second engine of {} (slots {} + KV {}), the budget leaves "
           "{} (start the server with them instead)",
           offload.policy_text(), offload.cache_slots, bytes_text(need),
           bytes_text(plan.slot_bytes), bytes_text(plan.kv_bytes),
           bytes_text(options_.memory_room));
  }
  return offload.policy_text();
}

bool Worker::submit(std::vector<std::shared_ptr<Job>> jobs) {
  SM_ASSERT(!jobs.empty());
  {
    std::lock_guard lock(mu_);
    if (stopping_ || draining_ || queue_.size() >= options_.queue_capacity) return false;
    queue_.push_back(std::move(jobs));
  }
  cv_.notify_one();
  return true;
}

size_t Worker::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

bool Worker::busy() const {
  std::lock_guard lock(mu_);
  return running_job_;
}

engine::Engine& Worker::engine_for(const Job& job, std::string& policy_used, int& cache_used) {
  const schedule::OffloadConfig& defaults = options_.engine.offload;
  if (job.policy.empty() && job.cache_slots < 0) {
    policy_used = default_policy_;
    cache_used = defaults.cache_slots;
    return *default_engine_;
  }
  const schedule::OffloadConfig offload =
      engine::resolve_offload(model_, variant(defaults, job.policy, job.cache_slots));
  policy_used = offload.policy_text();
  cache_used = offload.cache_slots;
  if (policy_used == default_policy_ && cache_used == defaults.cache_slots) return *default_engine_;
  const std::string key = policy_used + "|" + std::to_string(cache_used);
  if (!custom_engine_ || key != custom_key_) {
    custom_engine_.reset();  // free the old one first
    engine::EngineParams p = options_.engine;
    p.offload = offload;
    custom_engine_ = std::make_unique<engine::Engine>(model_, p);
    custom_key_ = key;
  }
  return *custom_engine_;
}

void Worker::run(Job& job) {
  if (job.cancelled.load()) {
    std::lock_guard lock(job.mu);
    job.finish_reason = "cancelled";
    job.done = true;
  } else {
    std::string policy_used;
    int cache_used = 0;
    try {
      engine::Engine& engine = engine_for(job, policy_used, cache_used);
      {
        std::lock_guard lock(job.mu);
        job.started = true;
        job.policy_used = policy_used;
        job.cache_used = cache_used;
        job.queue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                 job.submitted)
                           .count();
      }
      run_job(
          engine, tok_, options_.engine.max_batch, job,
          [this](const engine::Engine& e, bool final) { take_view(e, final); },
          options_.drafting);
      // A long request's KV pages go back to the system now, not at the next request (kept:
      // what short requests use); the drafter's too.
      engine.end_sequence(kKeptKvPositions);
      if (options_.drafting.drafter != nullptr)
        options_.drafting.drafter->end_sequence(kKeptKvPositions);
    } catch (const std::exception& e) {
      std::lock_guard lock(job.mu);
      job.error = e.what();
      job.done = true;
    }
  }
  job.notify();
}

void Worker::take_view(const engine::Engine& engine, bool final) {
  const auto now = std::chrono::steady_clock::now();
  if (!final && now - view_at_ < std::chrono::milliseconds(50)) return;  // the page polls
  CacheView v = snapshot_cache(engine, 0);
  std::lock_guard lock(view_mu_);
  v.version = view_.version + 1;
  view_ = std::move(v);
  view_at_ = now;
}

CacheView Worker::cache_view() const {
  std::lock_guard lock(view_mu_);
  return view_;
}

void Worker::loop() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> request;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      request = std::move(queue_.front());
      queue_.pop_front();
      running_job_ = true;
    }
    for (auto& job : request) run(*job);
    std::lock_guard lock(mu_);
    running_job_ = false;
  }
}

}  // namespace steermoe::server
