// The one way tests read the message of an error they expect.
#pragma once

#include <string>

#include "common/error.hpp"

namespace steermoe::test_support {

// The message of the `E` (steermoe::Error unless named) that `f` throws, or "" when `f` returns.
template <class E = Error, class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace steermoe::test_support
