// Response bodies that come from the engine, for the HTTP front end (http::Pending): the JSON
// of a request's jobs once they are all done, or their server-sent events as tokens become
// safe to show. Never blocks: the front end pulls when the engine signals (Job::on_change).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/generation.hpp"
#include "server/http_front.hpp"
#include "server/protocol.hpp"

namespace steermoe::server {

struct JobHooks {
  std::function<void(const Job&)> finished;  // once per job that ran to its end (metrics)
  std::function<void()> cancelled;           // once per request whose client went away
};

// The response object from the finished jobs (in order).
using BuildFn = std::function<json(const std::vector<const Job*>&)>;
// One event from (job index, job, first event of this job, text delta, generated tokens
// [from, to), finish reason or "").
using ChunkFn = std::function<std::string(size_t, const Job&, bool, const std::string&, size_t,
                                          size_t, const std::string&)>;

// application/json, status 200 (500 with an error object if the engine failed).
std::shared_ptr<http::Pending> json_when_done(std::vector<std::shared_ptr<Job>> jobs, BuildFn build,
                                              JobHooks hooks);
// text/event-stream: the events of every job in order, then `tail()` (a usage event or ""),
// then "data: [DONE]".
std::shared_ptr<http::Pending> event_stream(std::vector<std::shared_ptr<Job>> jobs, ChunkFn chunk,
                                            std::function<std::string()> tail, JobHooks hooks);

}  // namespace steermoe::server
