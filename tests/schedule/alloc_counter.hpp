// Counts heap allocations (global operator new, replaced in alloc_counter.cpp for the whole test
// binary) while counting is on.
#pragma once

#include <cstdint>

namespace steermoe::testing {
void start_counting_allocations();
// Stops counting and returns the allocations since start_counting_allocations().
int64_t stop_counting_allocations();
}  // namespace steermoe::testing
