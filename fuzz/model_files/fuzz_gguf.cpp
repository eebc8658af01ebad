// libFuzzer target: parse arbitrary bytes as GGUF. Any input must either parse or throw
// steermoe::Error; for parsed files every metadata getter and tensor view must stay in bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "model/gguf.hpp"

using steermoe::model::GgufFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  // Small limits so that the fuzzer explores the limit checks instead of allocating.
  steermoe::model::GgufLimits limits;
  limits.max_string_bytes = 1 << 16;
  limits.max_array_items = 1 << 16;
  try {
    const GgufFile file = GgufFile::from_bytes(std::move(bytes), "fuzz.gguf", limits);
    for (const auto& [key, value] : file.metadata()) {
      try {
        (void)file.get_uint(key);
      } catch (const steermoe::Error&) {
      }
      try {
        (void)file.get_string_array(key);
      } catch (const steermoe::Error&) {
      }
    }
    volatile uint8_t sink = 0;
    for (const auto& info : file.tensor_infos()) {
      try {
        const auto view = file.tensor(info.name);
        // Touch the first and last byte: ASan flags any view outside the buffer.
        if (view.nbytes > 0)
          sink = sink ^ static_cast<uint8_t>(view.data[0]) ^
                 static_cast<uint8_t>(view.data[view.nbytes - 1]);
        if (view.nbytes <= 4096 && steermoe::model::dtype_converts_to_f32(view.dtype))
          (void)view.to_f32();
      } catch (const steermoe::Error&) {
      }
    }
  } catch (const steermoe::Error&) {
  }
  return 0;
}
