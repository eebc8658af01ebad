// Shared between the kernel implementation files; not part of the API.
#pragma once

#include <cstddef>

#include "kernels/kernels.hpp"

namespace steermoe::kernels::detail {

// One table per implementation file. The SIMD tables may only be used when isa_available().
const KernelTable& scalar_table();
const KernelTable& avx2_table();
const KernelTable& avx512_table();
const KernelTable& avx512_bf16_table();

// Scratch of at least `bytes` bytes, 64-byte aligned, from the arena of the parallel_for chunk
// being run (or of the calling thread outside any pool); grows (allocates) only when a larger size
// is asked for. Arenas belong to chunk indices, not threads (one chunk runs on one thread, so no
// two threads share an arena at once), so after one warm-up call every later call of the same
// sizes allocates nothing, whichever thread happens to claim which chunk. `slot` picks one of a
// few independent buffers so that a kernel can hold two at once.
void* thread_scratch(size_t bytes, int slot);

// DeltaRuleChunkParams with every 0 stride replaced by its documented default, checked (chunk in
// [1, kMaxDeltaRuleChunk]); every delta_rule_chunked implementation calls this.
DeltaRuleChunkParams resolve_chunk_params(DeltaRuleChunkParams p);

// RoPE angles for one position: cos_out/sin_out[i] for i in [0, rot_dim/2), computed the same
// way by every implementation (so RoPE is bit-identical across Isas): from p.inv_freq when given
// (else theta), times p.attention_factor.
void rope_angles(size_t pos, size_t rot_dim, const RopeParams& p, float* cos_out, float* sin_out);

// Largest rot_dim RoPE accepts (the angle tables live on the stack).
inline constexpr size_t kMaxRotDim = 1024;

}  // namespace steermoe::kernels::detail

namespace steermoe::kernels::detail {

// AttentionParams with every 0 stride replaced by its documented default; each
// attention_heads implementation calls this, so tables accept the same params as attention().
inline AttentionParams resolve_strides(AttentionParams p) {
  if (p.q_head_stride == 0) p.q_head_stride = p.head_dim_k;
  if (p.out_head_stride == 0) p.out_head_stride = p.head_dim_v;
  if (p.k_pos_stride == 0) p.k_pos_stride = p.n_kv_heads * p.head_dim_k;
  if (p.v_pos_stride == 0) p.v_pos_stride = p.n_kv_heads * p.head_dim_v;
  return p;
}

}  // namespace steermoe::kernels::detail
