// STEERMOE_ASAN (common/sanitizer.hpp) in the tests: memory-bound assertions are meaningless under
// AddressSanitizer, whose allocator keeps freed memory in quarantine and adds redzones.
#pragma once

#include "common/sanitizer.hpp"
