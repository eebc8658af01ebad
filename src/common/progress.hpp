// Progress of long work on stderr: done/total, rate and ETA.
//
//   Progress progress("perplexity", total_tokens, "tokens");
//   for (...) { ...; progress.advance(n); }   // also checks for Ctrl-C (check_interrupt)
//   progress.finish();
//
// When stderr is a terminal the line is redrawn in place (\r) at most 10 times a second;
// otherwise a full line is printed every 10 s. Nothing is printed for work that finishes within
// 2 s, or at all when quiet (set_progress_quiet, the CLI's --quiet / STEERMOE_QUIET=1).
// advance() costs one clock read per call; call it per unit of work that takes >= ~1 us.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace steermoe {

void set_progress_quiet(bool quiet);
bool progress_quiet();

class Progress {
 public:
  // total <= 0: unknown (no ETA, no percentage).
  Progress(std::string label, int64_t total, std::string unit);
  ~Progress();  // finish() if not done
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Adds `n` units done; may print; throws Interrupted after Ctrl-C.
  void advance(int64_t n = 1);
  void set_total(int64_t total) { total_ = total; }
  int64_t done() const { return done_; }
  // Prints the final line (if anything was printed before) and stops reporting.
  void finish();

  // Test/format hook: the line advance() would print now.
  std::string line(double elapsed_s) const;

 private:
  void report(bool final_line);

  using Clock = std::chrono::steady_clock;
  std::string label_, unit_;
  int64_t total_ = 0, done_ = 0;
  Clock::time_point start_, last_print_;
  bool tty_ = false, printed_ = false, finished_ = false;
  int64_t printed_done_ = -1;  // the count of the last line printed
  size_t last_width_ = 0;
};

}  // namespace steermoe
