// Score files (compare --scores): any bytes parse into items or raise steermoe::Error; parsed
// items pair with themselves and compare without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "eval/compare.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto items = steermoe::eval::parse_scores_jsonl(text, "fuzz");
    if (items.empty() || items.size() > 64) return 0;  // keep each input fast
    const auto tasks = steermoe::eval::pair_scores(items, "a", items, "b", false, nullptr);
    steermoe::eval::CompareOptions options;
    options.exact_limit = 12;  // keep each input fast
    const auto rows = steermoe::eval::compare_tasks(tasks, options);
    (void)steermoe::eval::tasks_json(rows, steermoe::eval::summarize_tasks(rows), options);
  } catch (const steermoe::Error&) {
  }
  return 0;
}
