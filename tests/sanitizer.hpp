// STEERMOE_ASAN is defined in AddressSanitizer builds (GCC's __SANITIZE_ADDRESS__, Clang's
// __has_feature). Memory-bound assertions are meaningless there: the allocator keeps freed
// memory in quarantine (256 MB by default) and adds redzones, so resident memory grows by design.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define STEERMOE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STEERMOE_ASAN 1
#endif
#endif
