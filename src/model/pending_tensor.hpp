// A tensor a streaming writer (GGUF, safetensors) has been told about but not yet written: its
// header entry is known up front, its bytes are produced when the data section is streamed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/dtype.hpp"
#include "model/file_writer.hpp"

namespace steermoe::model {

struct PendingTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // row-major, outermost first
  uint64_t nbytes;
  TensorBytesFn produce;
};

}  // namespace steermoe::model
