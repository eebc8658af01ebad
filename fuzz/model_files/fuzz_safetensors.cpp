// libFuzzer target: parse arbitrary bytes as a safetensors file. Any input must either parse or
// throw steermoe::Error; for parsed files every tensor view must stay inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "model/safetensors.hpp"

using steermoe::model::SafetensorsFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  try {
    const SafetensorsFile file = SafetensorsFile::from_bytes(std::move(bytes), "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& info : file.tensor_infos()) {
      const auto view = file.tensor(info.name);
      if (view.nbytes > 0)
        sink = sink ^ static_cast<uint8_t>(view.data[0]) ^
               static_cast<uint8_t>(view.data[view.nbytes - 1]);
      if (view.nbytes <= 4096 && steermoe::model::dtype_converts_to_f32(view.dtype))
        (void)view.to_f32();
    }
  } catch (const steermoe::Error&) {
  }
  return 0;
}
