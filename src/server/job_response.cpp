#include "server/job_response.hpp"

namespace steermoe::server {

namespace {

class JobBody : public http::Pending {
 public:
  JobBody(std::vector<std::shared_ptr<Job>> jobs, JobHooks hooks)
      : jobs_(std::move(jobs)), hooks_(std::move(hooks)) {}

  void cancel() override {
    if (complete_) return;
    bool first = true;
    for (const auto& j : jobs_) {
      if (j->cancelled.exchange(true)) first = false;
    }
    if (first && hooks_.cancelled) hooks_.cancelled();
  }

 protected:
  void finished(const Job& job) {
    if (hooks_.finished) hooks_.finished(job);
  }
  std::vector<std::shared_ptr<Job>> jobs_;
  JobHooks hooks_;
  bool complete_ = false;
};

class JsonWhenDone final : public JobBody {
 public:
  JsonWhenDone(std::vector<std::shared_ptr<Job>> jobs, BuildFn build, JobHooks hooks)
      : JobBody(std::move(jobs), std::move(hooks)), build_(std::move(build)) {}

  bool streaming() const override { return false; }
  int status() const override { return status_; }
  // JSON allows white space before a value.
  std::string_view filler() const override { return " "; }

  bool pull(std::string& out) override {
    for (const auto& j : jobs_) {
      std::lock_guard lock(j->mu);
      if (!j->done) return false;
    }
    complete_ = true;
    std::vector<const Job*> view;
    for (const auto& j : jobs_) {
      finished(*j);
      if (!j->error.empty()) {
        status_ = j->unavailable ? 503 : 500;
        out += dump(j->unavailable ? error_body(j->error, "server_shutting_down")
                                   : error_body("the engine failed: " + j->error, "server_error"));
        return true;
      }
      view.push_back(j.get());
    }
    try {
      out += dump(build_(view));
    } catch (const std::exception& e) {
      status_ = 500;
      out += dump(
          error_body(std::string("could not build the response: ") + e.what(), "server_error"));
    }
    return true;
  }

 private:
  BuildFn build_;
  int status_ = 200;
};

class EventStream final : public JobBody {
 public:
  EventStream(std::vector<std::shared_ptr<Job>> jobs, ChunkFn chunk,
              std::function<std::string()> tail, JobHooks hooks)
      : JobBody(std::move(jobs), std::move(hooks)),
        chunk_(std::move(chunk)),
        tail_(std::move(tail)) {}

  bool streaming() const override { return true; }
  // An SSE comment line: clients skip it.
  std::string_view filler() const override { return ":\n\n"; }

  bool pull(std::string& out) override {
    while (job_ < jobs_.size()) {
      if (!pull_job(*jobs_[job_], out)) return false;
    }
    if (complete_) return true;
    complete_ = true;
    out += tail_() + "data: [DONE]\n\n";
    return true;
  }

 private:
  // Appends the events job `job_` has ready; true when it is done (the next job is current).
  bool pull_job(Job& job, std::string& out) {
    std::unique_lock lock(job.mu);
    // The opening event carries the echoed prompt's logprobs: only once they are scored.
    const bool progress = job.done || job.safe_bytes > bytes_ || job.safe_tokens > tokens_ ||
                          (job.prompt_done && !opened_);
    if (!progress) return false;
    if (!job.error.empty()) {
      out += sse(job.unavailable ? error_body(job.error, "server_shutting_down")
                                 : error_body("the engine failed: " + job.error, "server_error"));
      lock.unlock();
      finished(job);
      job_ = jobs_.size();  // nothing more after an engine error
      return true;
    }
    const std::string delta = job.text.substr(bytes_, job.safe_bytes - bytes_);
    const size_t from = tokens_, to = job.safe_tokens;
    const bool opening = !opened_;
    opened_ = true;
    if (opening || !delta.empty() || to > from) {
      out += chunk_(job_, job, opening, delta, from, to, "");
    }
    bytes_ = job.safe_bytes;
    tokens_ = to;
    if (!job.done) return false;
    out += chunk_(job_, job, false, "", to, to, job.finish_reason);
    lock.unlock();
    finished(job);
    ++job_;
    bytes_ = tokens_ = 0;
    opened_ = false;
    return true;
  }

  ChunkFn chunk_;
  std::function<std::string()> tail_;
  size_t job_ = 0;     // current job
  size_t bytes_ = 0;   // its text bytes already sent
  size_t tokens_ = 0;  // its generated tokens already sent
  bool opened_ = false;
};

}  // namespace

std::shared_ptr<http::Pending> json_when_done(std::vector<std::shared_ptr<Job>> jobs, BuildFn build,
                                              JobHooks hooks) {
  return std::make_shared<JsonWhenDone>(std::move(jobs), std::move(build), std::move(hooks));
}

std::shared_ptr<http::Pending> event_stream(std::vector<std::shared_ptr<Job>> jobs, ChunkFn chunk,
                                            std::function<std::string()> tail, JobHooks hooks) {
  return std::make_shared<EventStream>(std::move(jobs), std::move(chunk), std::move(tail),
                                       std::move(hooks));
}

}  // namespace steermoe::server
