// STEERMOE_ASAN is defined in AddressSanitizer builds (GCC's __SANITIZE_ADDRESS__, Clang's
// __has_feature). There the allocator is ASan's: freed memory sits in quarantine (256 MB by
// default) with redzones, so resident memory grows by design, and glibc's malloc extensions that
// ASan does not intercept (malloc_trim) must not be called.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define STEERMOE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STEERMOE_ASAN 1
#endif
#endif
