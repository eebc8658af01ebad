// The engine worker: one thread, one request at a time (batch 1), a bounded FIFO queue in front.
// It keeps the default engine (the server's --policy/--cache) and one engine for the last
// per-request policy that differed from it, so alternating requests do not rebuild every time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.hpp"
#include "model/weights.hpp"
#include "server/cache_view.hpp"
#include "server/generation.hpp"
#include "tokenizer/tokenizer.hpp"

namespace steermoe::server {

struct WorkerOptions {
  engine::EngineParams engine;  // defaults: offload (policy, cache, calibration), threads, context
  size_t queue_capacity = 16;   // requests waiting (not counting the one running)
  Drafting drafting;            // --draft: the drafter's engine (outlives the worker) and k
  // Bytes a request's own engine (its policy or cache) may hold beside the default engine: what
  // --mem-limit leaves after the default engine's plan; the maximum without a budget.
  uint64_t memory_room = UINT64_MAX;
};

class Worker {
 public:
  // Builds the default engine (throws steermoe::Error on a bad policy/cache) and starts the thread.
  Worker(const model::Model& model, const tokenizer::Tokenizer& tok, const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Queues one request (its prompts run back to back, in order). False if the queue is full
  // (the caller answers 503) or the worker is stopping.
  bool submit(std::vector<std::shared_ptr<Job>> jobs);
  size_t queue_depth() const;
  bool busy() const;
  // Shutdown in two steps: drain() takes no more requests and ends the queued ones at once as
  // unavailable (503), while the running one finishes; idle() then says when it has. stop()
  // ends everything, the running request cancelled.
  void drain();
  bool draining() const;
  bool idle() const;
  void stop();

  int context() const { return context_; }
  // The server's --policy (canonical) and cache size.
  std::string default_policy() const { return default_policy_; }
  int default_cache() const { return options_.engine.offload.cache_slots; }

  // Checks a per-request policy (empty: the default) and cache size (< 0: the default) against
  // the model without building an engine. Returns the canonical policy string; throws
  // steermoe::Error with a clear message.
  std::string check_policy(const std::string& policy, int cache_slots) const;

  // The expert cache of the engine that ran last (the default one before any request), as of
  // its last token (snapshots at most every 50 ms while a request runs, and at its end).
  CacheView cache_view() const;

 private:
  void loop();
  void run(Job& job);
  void take_view(const engine::Engine& engine, bool final);
  engine::Engine& engine_for(const Job& job, std::string& policy_used, int& cache_used);

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  WorkerOptions options_;
  int context_ = 0;
  std::unique_ptr<engine::Engine> default_engine_;
  std::string default_policy_;
  std::unique_ptr<engine::Engine> custom_engine_;
  std::string custom_key_;

  mutable std::mutex view_mu_;
  CacheView view_;
  std::chrono::steady_clock::time_point view_at_{};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<std::shared_ptr<Job>>> queue_;
  bool running_job_ = false;
  bool stopping_ = false;
  bool draining_ = false;
  std::thread thread_;
};

}  // namespace steermoe::server
