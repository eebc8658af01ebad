#include "common/interrupt.hpp"

#include <signal.h>

#include <atomic>

namespace steermoe {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_interrupt(int sig) {
  if (g_interrupted.exchange(true)) {
    // Second signal: give up waiting for the loop to notice.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() {
  return g_interrupted.load(std::memory_order_relaxed);
}

void check_interrupt() {
  if (g_interrupted.load(std::memory_order_relaxed)) throw Interrupted();
}

void set_interrupt_requested(bool value) {
  g_interrupted.store(value, std::memory_order_relaxed);
}

}  // namespace steermoe
