// Counts heap allocations while counting is on, for the tests that prove a hot path allocates
// nothing once warm. alloc_counter.cpp replaces the global operator new and delete for the whole
// test binary it is linked into (add it to that binary's SOURCES).
#pragma once

#include <cstdint>

namespace steermoe::test_support {

void start_counting_allocations();
// Stops counting and returns the allocations since start_counting_allocations().
int64_t stop_counting_allocations();

}  // namespace steermoe::test_support
