#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace steermoe {

void assertion_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "steermoe internal error: %s:%d: assertion `%s` failed %s\n", file, line,
               expr, msg);
  std::abort();
}

}  // namespace steermoe
