// Caps on memory sized by a number from a file or a flag. Before allocating something whose
// size comes from input, call check_allocation(): it refuses a request larger than the
// machine's physical memory (or STEERMOE_MAX_ALLOC_BYTES when set, for tests and shared
// machines) with a message naming the input and the size asked for, instead of letting the
// allocation fail later as std::bad_alloc or the OOM killer.
#pragma once

#include <cstdint>
#include <string>

namespace steermoe {

// Physical memory of this machine in bytes (sysconf), or the STEERMOE_MAX_ALLOC_BYTES override.
uint64_t allocation_cap_bytes();

// Throws steermoe::Error "<where>: <field>: <what> needs <N> (<bytes> bytes), more than the
// <cap> this machine has; expected ..." when bytes > allocation_cap_bytes(). `hint` says what to
// change ("lower -c").
void check_allocation(const std::string& where, const std::string& field, uint64_t bytes,
                      const std::string& what, const std::string& hint);

// a * b * ... saturating at UINT64_MAX (sizes computed from untrusted numbers).
uint64_t saturating_mul(uint64_t a, uint64_t b);

// "1.5 GiB", "12.0 MiB", "512 bytes".
std::string bytes_text(uint64_t bytes);

}  // namespace steermoe
