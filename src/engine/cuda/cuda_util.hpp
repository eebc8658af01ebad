// Internal to engine/cuda/: CUDA runtime errors as steermoe::Error, and the weight types the GPU
// kernels compute with.
#pragma once

#include <cuda_runtime.h>

#include "common/error.hpp"
#include "kernels/cuda/forward_cuda.hpp"
#include "kernels/kernels.hpp"

namespace steermoe::engine {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("cuda", what, "expected success, found {}", cudaGetErrorString(err));
}
inline void check_launch(int err, const char* what) {
  check(static_cast<cudaError_t>(err), what);
}

// The kernels' type of a weight matrix; an error naming the type for the others.
inline kernels::cuda::WType weight_type(kernels::DType d) {
  switch (d) {
    case kernels::DType::kBF16:
      return kernels::cuda::WType::kBF16;
    case kernels::DType::kF16:
      return kernels::cuda::WType::kF16;
    case kernels::DType::kF32:
      return kernels::cuda::WType::kF32;
    default:
      break;
  }
  fail("--backend cuda", "weights",
       "expected F32, F16 or BF16 matrices (the CUDA backend has no quantized kernels yet), found "
       "{}",
       kernels::dtype_name(d));
}

}  // namespace steermoe::engine
