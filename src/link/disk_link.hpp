// A link that reads experts from the model file(s) into RAM slots, bypassing the page cache
// (O_DIRECT), through one io_uring ring (or pread where io_uring is unavailable). The whole model
// file never needs to fit in RAM: resident memory is the slots plus a few small buffers.
//
// Reads follow ExpertLayout's aligned over-read rule (4096-aligned file range -> 4096-aligned
// slot region), split into chunks of at most chunk_bytes with up to queue_depth reads in flight
// across consecutive copies. The ring may complete reads in any order; completed() is the FIFO
// watermark (every ticket <= it finished). Every read's length is checked: a short read is
// resubmitted for the rest, end of file before the expert's last byte is an error.
//
// Faults (I/O error, early end of file, a file truncated, modified or replaced while served, a
// checksum mismatch with verify on) are recorded by the copy thread and rethrown as
// steermoe::Error from completed(), wait() or enqueue() on the caller's thread, naming the file,
// layer and expert. The faulty copy and every later one never complete; the link stays failed
// (make a new one to continue).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "link/expert_layout.hpp"
#include "link/link.hpp"
#include "link/slot_arena.hpp"

namespace steermoe::link {

// Test hook: faults injected into chosen copies (by ticket), in both I/O paths.
struct FaultPlan {
  enum class Kind : uint8_t {
    kIoError,    // the copy's first read fails with EIO
    kShortRead,  // the copy's first read returns half its bytes (must be resubmitted, not fatal)
    kEarlyEof,   // the copy's first read returns 0 bytes (end of file): fatal
    kDelay,      // the copy completes delay_s after its reads did
    kCorrupt,    // one byte of the copy's first part is flipped in the slot after the reads
  };
  struct Fault {
    Ticket ticket = kNoTicket;
    Kind kind = Kind::kIoError;
    double delay_s = 0;
  };
  std::vector<Fault> faults;
};

enum class DiskIo : uint8_t {
  kAuto,   // io_uring if the ring can be created, else pread
  kUring,  // io_uring or an error
  kPread,  // pread on the copy thread (one read at a time)
};

struct DiskLinkOptions {
  DiskIo io = DiskIo::kAuto;
  // O_DIRECT reads; where the filesystem refuses O_DIRECT (at open or at the first read) the
  // file is read buffered instead (direct_refused() says so).
  bool direct = true;
  // Check every copied expert's checksum against a reference; a mismatch is an error.
  bool verify = false;
  // Reference checksums, [layer * experts + expert] (link::expert_checksum of the true bytes).
  // Empty with verify on: computed at construction by one full read pass over every expert
  // (through the same read path, O_DIRECT when on), which takes a full read of the experts.
  std::vector<uint64_t> reference_checksums;
  int queue_depth = 16;                      // io_uring reads in flight
  uint64_t chunk_bytes = uint64_t{1} << 20;  // largest single read (a multiple of 4096)
  // After each copy, fstat each file read and stat its path: a file truncated, modified (size /
  // mtime) or replaced (inode) since the link opened it is an error. Costs two syscalls a copy.
  bool check_files = true;
  FaultPlan faults;
};

class DiskLink final : public Link {
 public:
  // `layout` and `arena` must outlive the link; every part must lie in a file and the arena's
  // slots must hold layout.slot_bytes(). Opens every file, checks each part against its size,
  // computes the reference checksums if needed and starts the copy thread. Throws
  // steermoe::Error naming the file on failure.
  DiskLink(const ExpertLayout& layout, SlotArena& arena, DiskLinkOptions options);
  ~DiskLink() override;  // waits for reads in flight (they write into the slots), then stops
  DiskLink(const DiskLink&) = delete;
  DiskLink& operator=(const DiskLink&) = delete;

  Ticket enqueue(const CopyRequest& copy) override;  // copy.bytes is not used
  Ticket completed() override;
  void wait(Ticket ticket) override;
  double now() override;  // steady clock, seconds since construction
  double busy_seconds() override;

  bool uses_uring() const;
  // True if some file could not be read with O_DIRECT (read buffered instead).
  bool direct_refused() const;
  // "io_uring, O_DIRECT" / "pread, buffered" ...
  std::string mode() const;
  // Bytes read from the files so far (including the aligned over-read).
  int64_t bytes_read() const;
  // Non-throwing views of the completion state (tests, reports).
  Ticket watermark() const;
  bool failed() const;
  std::string error() const;
  // The reference checksums in use (empty without verify).
  const std::vector<uint64_t>& reference_checksums() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace steermoe::link
