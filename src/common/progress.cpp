#include "common/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/interrupt.hpp"

namespace steermoe {
namespace {

std::atomic<bool> g_quiet{false};

constexpr double kQuietStartS = 2.0;   // short runs print nothing
constexpr double kTtyIntervalS = 0.1;  // redraw rate on a terminal
constexpr double kLogIntervalS = 10.0; // one line per interval otherwise

std::string duration_text(double s) {
  if (!(s >= 0) || s > 1e9) return "?";
  const auto total = static_cast<int64_t>(s + 0.5);
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
}

std::string rate_text(double per_s) {
  if (per_s >= 1e6) return fmt::format("{:.2f}M", per_s / 1e6);
  if (per_s >= 1e4) return fmt::format("{:.1f}k", per_s / 1e3);
  if (per_s >= 10) return fmt::format("{:.0f}", per_s);
  return fmt::format("{:.2f}", per_s);
}

}  // namespace

void set_progress_quiet(bool quiet) {
  g_quiet.store(quiet);
}

bool progress_quiet() {
  if (g_quiet.load()) return true;
  const char* env = std::getenv("STEERMOE_QUIET");
  return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      start_(Clock::now()),
      last_print_(start_),
      tty_(::isatty(STDERR_FILENO) == 1) {
  if (progress_quiet()) finished_ = true;
}

Progress::~Progress() {
  if (!finished_ && printed_ && tty_) std::fputc('\n', stderr);
}

std::string Progress::line(double elapsed_s) const {
  const double rate = elapsed_s > 0 ? static_cast<double>(done_) / elapsed_s : 0.0;
  std::string s = fmt::format("{}: {}", label_, done_);
  if (total_ > 0) {
    s += fmt::format("/{} {} ({:.1f}%)", total_, unit_,
                     100.0 * static_cast<double>(done_) / static_cast<double>(total_));
  } else {
    s += " " + unit_;
  }
  s += fmt::format(", {} {}/s, {} elapsed", rate_text(rate), unit_, duration_text(elapsed_s));
  if (total_ > 0 && rate > 0 && done_ < total_) {
    s += fmt::format(", ETA {}", duration_text(static_cast<double>(total_ - done_) / rate));
  }
  return s;
}

void Progress::advance(int64_t n) {
  done_ += n;
  check_interrupt();
  if (finished_) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < kQuietStartS) return;
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (printed_ && since < (tty_ ? kTtyIntervalS : kLogIntervalS)) return;
  last_print_ = now;
  report(false);
}

void Progress::report(bool final_line) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string s = line(elapsed);
  if (tty_) {
    const size_t width = s.size();
    if (width < last_width_) s.append(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(stderr, "\r%s%s", s.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", s.c_str());
  }
  std::fflush(stderr);
  printed_ = true;
  printed_done_ = done_;
}

void Progress::finish() {
  if (finished_) return;
  // A log (not a terminal) that already has the last count's line would get it twice.
  if (printed_ && (tty_ || printed_done_ != done_)) report(true);
  finished_ = true;
}

}  // namespace steermoe
