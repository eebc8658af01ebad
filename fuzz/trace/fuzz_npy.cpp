// Fuzzes the .npy header parser and the trace validation on parsed arrays (first byte even), and
// the meta.json parser (first byte odd). Any exception other than steermoe::Error is a bug, and so
// is a meta that does not survive to_json -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "trace/npy.hpp"
#include "trace/trace.hpp"

namespace {

void fuzz_array(const uint8_t* data, size_t size) {
  using steermoe::trace::DType;
  const steermoe::trace::NpyArray array = steermoe::trace::NpyArray::from_bytes(
      std::vector<uint8_t>(data, data + size), "fuzz.npy", {DType::kF32, DType::kI32, DType::kI64});
  steermoe::trace::TraceMeta meta;
  meta.layers = 2;
  meta.experts = 3;
  meta.top_k = 2;
  meta.vocab = 1000;
  if (array.dtype() == DType::kF32) {
    if (array.shape().size() == 3)
      steermoe::trace::validate_scores(meta, array, array.shape()[0], true);
    float sum = 0;  // touch every element: the view must cover exactly the data
    for (float v : array.values<float>()) sum += v;
    (void)sum;
  } else {
    steermoe::trace::load_tokens(meta, array);
    steermoe::trace::load_sequence_starts(array, 64);
  }
}

void fuzz_meta(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const steermoe::trace::TraceMeta meta = steermoe::trace::parse_trace_meta(text, "fuzz/meta.json");
  const nlohmann::json once = meta.to_json();
  const nlohmann::json twice = steermoe::trace::trace_meta_from_json(once, "again").to_json();
  SM_ASSERT(once == twice);
  (void)meta.router_spec();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] % 2 == 0) {
      fuzz_array(data + 1, size - 1);
    } else {
      fuzz_meta(data + 1, size - 1);
    }
  } catch (const steermoe::Error&) {
    // Rejected with a message: the expected outcome for bad input.
  }
  return 0;
}
