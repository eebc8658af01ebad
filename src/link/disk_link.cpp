#include "link/disk_link.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/error.hpp"
#include "link/checksum.hpp"
#include "link/copy_queue.hpp"

namespace steermoe::link {
namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

bool same_time(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr size_t kMaxCopies = 64;  // copies the ring works on at once (more wait in the queue)
constexpr int kMaxAttempts = 64;   // resubmissions of one read before giving up

struct File {
  std::string path;
  int fd = -1;
  bool direct = false;
  struct stat opened {};
};

// One read in flight: a chunk of a part's aligned file range.
struct Read {
  size_t copy = 0;  // index in the copy ring
  int32_t file = 0;
  uint64_t offset = 0;  // file offset of the next byte to read
  std::byte* dst = nullptr;
  uint64_t length = 0;  // bytes requested
  uint64_t need = 0;    // bytes that must arrive (the rest is over-read past the part)
  int attempts = 0;
  bool direct = false;  // issued on an O_DIRECT descriptor
  bool inject = false;  // apply the copy's read fault to this read's first result
};

// A copy the thread works on.
struct CopyState {
  QueuedCopy q;
  size_t part = 0;       // next part to issue
  uint64_t next = 0;     // next file offset to issue in that part (0: part not started)
  bool started = false;  // `next` is valid for `part`
  bool issued_all = false;
  bool injected = false;  // the read fault (if any) was given to a read
  int outstanding = 0;
};

enum class Outcome { kDone, kResubmit, kFailed };

}  // namespace

struct DiskLink::Impl {
  const ExpertLayout& layout;
  SlotArena& arena;
  DiskLinkOptions options;
  int64_t start_ns = 0;
  std::vector<File> files;
  std::vector<uint64_t> reference;
  bool uring = false;
  io_uring ring{};
  int wake_fd = -1;
  uint64_t wake_buffer = 0;
  CopyQueue queue;
  Completion done;
  std::atomic<bool> stopping{false};
  std::atomic<bool> direct_refused{false};
  bool direct_at_open = false;  // some file was opened with O_DIRECT
  std::atomic<int64_t> bytes_read{0};
  // Busy time (some copy enqueued and not yet complete), kept under its own mutex because the
  // caller enqueues and the copy thread completes: idle when the last published ticket is the
  // last enqueued one.
  std::mutex busy_mutex;
  Ticket busy_enqueued = kNoTicket, busy_published = kNoTicket;
  double busy_since = 0, busy_total = 0;
  std::thread thread;

  // Copy-thread state (uring path).
  std::vector<CopyState> copies = std::vector<CopyState>(kMaxCopies);
  size_t copy_head = 0, copy_count = 0, issue_cursor = 0;  // issue_cursor: offset from head
  std::vector<Read> reads;
  std::vector<uint32_t> free_reads;
  int in_flight = 0;
  bool wake_armed = false;

  Impl(const ExpertLayout& l, SlotArena& a, DiskLinkOptions o)
      : layout(l), arena(a), options(std::move(o)) {}

  ~Impl() {
    for (File& f : files)
      if (f.fd >= 0) ::close(f.fd);
    if (uring) io_uring_queue_exit(&ring);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  // Every copy up to `ticket` finished: the watermark moves, and the busy clock stops when no
  // copy is left in flight.
  void publish(Ticket ticket) {
    {
      const std::lock_guard<std::mutex> lock(busy_mutex);
      if (busy_published < busy_enqueued && ticket >= busy_enqueued)
        busy_total += now() - busy_since;
      busy_published = std::max(busy_published, ticket);
    }
    done.publish(ticket);
  }

  double now() const {
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    return static_cast<double>(ns - start_ns) * 1e-9;
  }

  const FaultPlan::Fault* fault(Ticket ticket, FaultPlan::Kind kind) const {
    for (const FaultPlan::Fault& f : options.faults.faults)
      if (f.ticket == ticket && f.kind == kind) return &f;
    return nullptr;
  }
  const FaultPlan::Fault* read_fault(Ticket ticket) const {
    for (const FaultPlan::Fault& f : options.faults.faults) {
      if (f.ticket == ticket &&
          (f.kind == FaultPlan::Kind::kIoError || f.kind == FaultPlan::Kind::kShortRead ||
           f.kind == FaultPlan::Kind::kEarlyEof)) {
        return &f;
      }
    }
    return nullptr;
  }

  // ---- files ----

  void open_files() {
    files.resize(layout.files().size());
    for (size_t i = 0; i < files.size(); ++i) {
      File& f = files[i];
      f.path = layout.files()[i].path.string();
      int flags = O_RDONLY | O_CLOEXEC;
      if (options.direct) {
        f.fd = ::open(f.path.c_str(), flags | O_DIRECT);
        f.direct = f.fd >= 0;
        direct_at_open = direct_at_open || f.direct;
        if (f.fd < 0 && errno == EINVAL) direct_refused = true;  // e.g. an old tmpfs
      }
      if (f.fd < 0) f.fd = ::open(f.path.c_str(), flags);
      if (f.fd < 0) fail(f.path, "open", "cannot open for reading ({})", errno_text(errno));
      if (::fstat(f.fd, &f.opened) != 0)
        fail(f.path, "open", "cannot stat ({})", errno_text(errno));
      const auto size = static_cast<uint64_t>(f.opened.st_size);
      if (size != layout.files()[i].size) {
        fail(f.path, "size", "expected {} bytes (as when the model was loaded), found {}",
             layout.files()[i].size, size);
      }
    }
  }

  // "" if file f is as opened; otherwise what changed.
  std::string file_change(int32_t index) const {
    const File& f = files[static_cast<size_t>(index)];
    struct stat now {};
    if (::fstat(f.fd, &now) != 0) return fmt::format("cannot stat ({})", errno_text(errno));
    if (now.st_size != f.opened.st_size) {
      return fmt::format("the file was truncated or resized while being served (size {} -> {})",
                         f.opened.st_size, now.st_size);
    }
    if (!same_time(now.st_mtim, f.opened.st_mtim))
      return "the file was modified while being served (mtime changed)";
    struct stat by_path {};
    if (::stat(f.path.c_str(), &by_path) != 0)
      return fmt::format("the file was removed while being served ({})", errno_text(errno));
    if (by_path.st_ino != f.opened.st_ino || by_path.st_dev != f.opened.st_dev)
      return "the file was replaced while being served (another file is now at its path)";
    return {};
  }

  std::string message(int32_t file, const CopyRequest& c, const std::string& what) const {
    const std::string& path = files[static_cast<size_t>(file)].path;
    std::string m = fmt::format("{}: {}: {}", path, layout.describe(c.layer, c.expert), what);
    const std::string change = file_change(file);
    if (!change.empty()) m += "; " + change;
    return m;
  }

  // ---- one read's result (both paths) ----

  // Applies the copy's injected read fault to the first result of its first read.
  int64_t inject(Read& r, Ticket ticket, int64_t res) const {
    if (!r.inject) return res;
    r.inject = false;
    const FaultPlan::Fault* f = read_fault(ticket);
    if (f == nullptr) return res;
    switch (f->kind) {
      case FaultPlan::Kind::kIoError:
        return -EIO;
      case FaultPlan::Kind::kEarlyEof:
        return 0;
      case FaultPlan::Kind::kShortRead:
        if (res > 0) {
          const auto half = static_cast<int64_t>(align_down(static_cast<uint64_t>(res) / 2));
          if (half == 0) return res;
          // As if the rest had not been read: scribble over it.
          std::memset(r.dst + half, 0xA5, static_cast<size_t>(res - half));
          return half;
        }
        return res;
      default:
        return res;
    }
  }

  Outcome on_result(Read& r, const CopyRequest& c, int64_t res, std::string& error) {
    File& f = files[static_cast<size_t>(r.file)];
    if (res < 0) {
      const int e = static_cast<int>(-res);
      if ((e == EINTR || e == EAGAIN) && ++r.attempts < kMaxAttempts) return Outcome::kResubmit;
      if (e == EINVAL && r.direct && ++r.attempts < kMaxAttempts) {
        // The filesystem accepted O_DIRECT at open but refuses these reads: read it buffered
        // (reads still in flight on the old descriptor keep their own reference to the file).
        if (f.direct) {
          const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) {
            error = message(r.file, c,
                            fmt::format("cannot reopen without O_DIRECT ({})", errno_text(errno)));
            return Outcome::kFailed;
          }
          ::close(f.fd);
          f.fd = fd;
          f.direct = false;
          direct_refused = true;
        }
        return Outcome::kResubmit;
      }
      error = message(r.file, c,
                      fmt::format("read of bytes [{}, {}) failed ({})", r.offset,
                                  r.offset + r.length, errno_text(e)));
      return Outcome::kFailed;
    }
    bytes_read.fetch_add(res, std::memory_order_relaxed);
    const auto got = static_cast<uint64_t>(res);
    if (got >= r.need) return Outcome::kDone;
    if (got == 0) {
      error = message(r.file, c,
                      fmt::format("the file ends at byte {}, before the expert's bytes end at {} "
                                  "(file truncated?)",
                                  r.offset, r.offset + r.need));
      return Outcome::kFailed;
    }
    // Short read: resubmit the rest (from an aligned offset for O_DIRECT; the bytes read twice
    // land at the same place).
    const uint64_t advance = f.direct ? align_down(got) : got;
    if (advance == 0 || ++r.attempts >= kMaxAttempts) {
      error = message(r.file, c,
                      fmt::format("read of bytes [{}, {}) makes no progress ({} bytes returned)",
                                  r.offset, r.offset + r.length, got));
      return Outcome::kFailed;
    }
    r.offset += advance;
    r.dst += advance;
    r.length -= advance;
    r.need -= advance;
    return Outcome::kResubmit;
  }

  // After every read of a copy finished: corruption hook, checksum, file check, delay hook.
  bool finish_copy(const QueuedCopy& q, std::string& error) {
    const CopyRequest& c = q.copy;
    std::byte* slot = arena.slot(c.layer, c.slot);
    const auto parts = layout.parts(c.layer, c.expert);
    if (fault(q.ticket, FaultPlan::Kind::kCorrupt) != nullptr && !parts.empty() &&
        parts[0].bytes > 0) {
      slot[parts[0].slot_offset + parts[0].bytes / 2] ^= std::byte{0x5A};
    }
    if (options.verify) {
      const uint64_t sum = expert_checksum(layout, c.layer, c.expert, slot);
      const uint64_t want =
          reference[static_cast<size_t>(c.layer) * static_cast<size_t>(layout.experts()) +
                    static_cast<size_t>(c.expert)];
      if (sum != want) {
        error = message(parts[0].file, c,
                        fmt::format("checksum mismatch after the copy (read {:016x}, expected "
                                    "{:016x}): wrong bytes were read",
                                    sum, want));
        return false;
      }
    }
    if (options.check_files) {
      int32_t last = -1;
      for (const ExpertPart& p : parts) {
        if (p.file == last) continue;
        last = p.file;
        const std::string change = file_change(p.file);
        if (!change.empty()) {
          error = fmt::format("{}: {}: {}", files[static_cast<size_t>(p.file)].path,
                              layout.describe(c.layer, c.expert), change);
          return false;
        }
      }
    }
    if (const FaultPlan::Fault* f = fault(q.ticket, FaultPlan::Kind::kDelay))
      std::this_thread::sleep_for(std::chrono::duration<double>(f->delay_s));
    return true;
  }

  // ---- pread path ----

  // Reads one part into `slot` synchronously; `with_fault` gives the copy's read fault to its first
  // read. Returns false with `error` set on failure.
  bool read_part(const ExpertPart& p, std::byte* slot, const QueuedCopy& q, bool with_fault,
                 std::string& error) {
    const uint64_t data_end = p.file_offset + p.bytes;
    for (uint64_t pos = p.read_begin(); pos < data_end;) {
      const uint64_t end = std::min(p.read_end(), pos + options.chunk_bytes);
      Read r;
      r.file = p.file;
      r.offset = pos;
      r.dst = slot + p.slot_read_offset() + (pos - p.read_begin());
      r.length = end - pos;
      r.need = std::min(end, data_end) - pos;
      r.inject = with_fault && pos == p.read_begin();
      for (;;) {
        const File& f = files[static_cast<size_t>(r.file)];
        r.direct = f.direct;
        int64_t res =
            ::pread(f.fd, r.dst, static_cast<size_t>(r.length), static_cast<off_t>(r.offset));
        if (res < 0) res = -errno;
        res = inject(r, q.ticket, res);
        const Outcome o = on_result(r, q.copy, res, error);
        if (o == Outcome::kDone) break;
        if (o == Outcome::kFailed) return false;
      }
      pos = end;
    }
    return true;
  }

  void run_pread() {
    QueuedCopy q;
    std::string error;
    while (!stopping.load(std::memory_order_acquire) && queue.pop(q, true)) {
      std::byte* slot = arena.slot(q.copy.layer, q.copy.slot);
      bool ok = true, first = true;
      for (const ExpertPart& p : layout.parts(q.copy.layer, q.copy.expert)) {
        ok = read_part(p, slot, q, first, error);
        first = false;
        if (!ok) break;
      }
      if (ok) ok = finish_copy(q, error);
      if (!ok) {
        done.fail(error);
        return;
      }
      publish(q.ticket);
    }
  }

  // ---- io_uring path ----

  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    SM_ASSERT(sqe != nullptr);
    io_uring_prep_read(sqe, wake_fd, &wake_buffer, sizeof wake_buffer, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    wake_armed = true;
  }

  void submit(Read& r, uint32_t index) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    SM_ASSERT(sqe != nullptr);  // the ring has queue_depth + 1 entries
    const File& f = files[static_cast<size_t>(r.file)];
    r.direct = f.direct;
    io_uring_prep_read(sqe, f.fd, r.dst, static_cast<unsigned>(r.length), r.offset);
    io_uring_sqe_set_data64(sqe, index);
    ++in_flight;
  }

  CopyState& copy_at(size_t offset) { return copies[(copy_head + offset) % kMaxCopies]; }

  // Takes queued copies into the copy ring.
  void take_copies() {
    QueuedCopy q;
    while (copy_count < kMaxCopies && queue.pop(q, false)) {
      CopyState& c = copy_at(copy_count);
      c = CopyState{};
      c.q = q;
      c.issued_all = layout.parts(q.copy.layer, q.copy.expert).empty();
      ++copy_count;
    }
  }

  // True if a copy older than the one at `offset` writes the same slot and has not finished
  // its reads: the later copy waits, so that a slot always ends up holding the last expert
  // enqueued for it (FIFO semantics, although reads of different copies overlap).
  bool slot_busy(size_t offset) {
    const CopyRequest& later = copy_at(offset).q.copy;
    for (size_t i = 0; i < offset; ++i) {
      const CopyState& c = copy_at(i);
      if (c.q.copy.layer == later.layer && c.q.copy.slot == later.slot &&
          (!c.issued_all || c.outstanding > 0)) {
        return true;
      }
    }
    return false;
  }

  // Issues reads, oldest copy first, while read records are free.
  void issue_reads() {
    while (!free_reads.empty() && issue_cursor < copy_count) {
      const size_t ring_index = (copy_head + issue_cursor) % kMaxCopies;
      CopyState& c = copies[ring_index];
      if (c.issued_all) {
        ++issue_cursor;
        continue;
      }
      const auto parts = layout.parts(c.q.copy.layer, c.q.copy.expert);
      if (c.part == 0 && !c.started && slot_busy(issue_cursor)) break;  // keep same-slot order
      while (c.part < parts.size() && parts[c.part].bytes == 0) ++c.part;
      if (c.part == parts.size()) {
        c.issued_all = true;
        continue;
      }
      const ExpertPart& p = parts[c.part];
      if (!c.started) {
        c.next = p.read_begin();
        c.started = true;
      }
      const uint64_t data_end = p.file_offset + p.bytes;
      const uint64_t end = std::min(p.read_end(), c.next + options.chunk_bytes);
      const uint32_t index = free_reads.back();
      free_reads.pop_back();
      Read& r = reads[index];
      r = Read{};
      r.copy = ring_index;
      r.file = p.file;
      r.offset = c.next;
      r.dst = arena.slot(c.q.copy.layer, c.q.copy.slot) + p.slot_read_offset() +
              (c.next - p.read_begin());
      r.length = end - c.next;
      r.need = std::min(end, data_end) - c.next;
      r.inject = !c.injected;
      c.injected = true;
      ++c.outstanding;
      submit(r, index);
      c.next = end;
      if (c.next >= data_end) {
        ++c.part;
        c.started = false;
        if (c.part == parts.size()) c.issued_all = true;
      }
    }
  }

  // Publishes the copies at the head whose reads all finished. Returns false on an error.
  bool retire(std::string& error) {
    Ticket last = kNoTicket;
    while (copy_count > 0) {
      CopyState& c = copies[copy_head];
      if (!c.issued_all || c.outstanding > 0) break;
      if (!finish_copy(c.q, error)) {
        if (last != kNoTicket) publish(last);  // the good copies before it
        return false;
      }
      last = c.q.ticket;
      copy_head = (copy_head + 1) % kMaxCopies;
      --copy_count;
      if (issue_cursor > 0) --issue_cursor;
    }
    if (last != kNoTicket) publish(last);
    return true;
  }

  void run_uring() {
    const auto depth = static_cast<size_t>(options.queue_depth);
    reads.resize(depth);
    free_reads.reserve(depth);
    for (size_t i = depth; i-- > 0;) free_reads.push_back(static_cast<uint32_t>(i));
    std::string error;
    bool failed_now = false;
    arm_wake();
    for (;;) {
      const bool stop = stopping.load(std::memory_order_acquire);
      if (!failed_now && !stop) {
        take_copies();
        issue_reads();
      }
      if ((failed_now || stop) && in_flight == 0) break;
      io_uring_submit(&ring);
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        error = fmt::format("io_uring: waiting for reads failed ({})", errno_text(-rc));
        done.fail(error);
        return;  // nothing can be reaped; the destructor waits no further
      }
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        const int64_t res = cqe->res;
        if (tag == kWakeTag) {
          wake_armed = false;
          continue;
        }
        --in_flight;
        Read& r = reads[tag];
        CopyState& c = copies[r.copy];
        if (failed_now || stop) {
          free_reads.push_back(static_cast<uint32_t>(tag));
          continue;
        }
        const int64_t result = inject(r, c.q.ticket, res);
        const Outcome o = on_result(r, c.q.copy, result, error);
        if (o == Outcome::kResubmit) {
          submit(r, static_cast<uint32_t>(tag));
        } else {
          free_reads.push_back(static_cast<uint32_t>(tag));
          --c.outstanding;
          if (o == Outcome::kFailed) {
            failed_now = true;
            done.fail(error);
          }
        }
      }
      io_uring_cq_advance(&ring, seen);
      if (!wake_armed && !stop) arm_wake();
      if (!failed_now && !retire(error)) {
        failed_now = true;
        done.fail(error);
      }
    }
  }

  void wake() const {
    const uint64_t one = 1;
    if (wake_fd >= 0) {
      [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
    }
  }

  // ---- verify: reference checksums by one full pass ----

  void compute_references() {
    const size_t n = static_cast<size_t>(layout.layers()) * static_cast<size_t>(layout.experts());
    if (!options.reference_checksums.empty()) {
      if (options.reference_checksums.size() != n) {
        fail("disk link", "reference checksums", "expected {} (layers x experts), found {}", n,
             options.reference_checksums.size());
      }
      reference = options.reference_checksums;
      return;
    }
    SlotArena scratch(1, 1, layout.slot_bytes());
    std::string error;
    QueuedCopy q;  // ticket 0: no fault applies
    reference.resize(n);
    for (int32_t m = 0; m < layout.layers(); ++m) {
      for (int32_t e = 0; e < layout.experts(); ++e) {
        q.copy.layer = m;
        q.copy.expert = e;
        for (const ExpertPart& p : layout.parts(m, e))
          if (!read_part(p, scratch.slot(0, 0), q, false, error)) throw Error(error);
        reference[static_cast<size_t>(m) * static_cast<size_t>(layout.experts()) +
                  static_cast<size_t>(e)] = expert_checksum(layout, m, e, scratch.slot(0, 0));
      }
    }
    bytes_read.store(0);
  }
};

DiskLink::DiskLink(const ExpertLayout& layout, SlotArena& arena, DiskLinkOptions options)
    : impl_(std::make_unique<Impl>(layout, arena, std::move(options))) {
  Impl& d = *impl_;
  d.start_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  SM_ASSERT_MSG(layout.complete(), "expert layout incomplete");
  if (!layout.on_disk()) {
    fail("disk link", "layout",
         "every expert must be stored in a file (some expert was converted at load time)");
  }
  if (arena.layers() != layout.layers() || arena.slot_bytes() < layout.slot_bytes()) {
    fail("disk link", "slots",
         "expected {} layers of slots of >= {} bytes, found {} layers of {} bytes", layout.layers(),
         layout.slot_bytes(), arena.layers(), arena.slot_bytes());
  }
  if (d.options.queue_depth < 1 || d.options.queue_depth > 4096)
    fail("disk link", "queue depth", "expected 1..4096, got {}", d.options.queue_depth);
  if (d.options.chunk_bytes == 0 || d.options.chunk_bytes % kDirectAlignment != 0 ||
      d.options.chunk_bytes > (uint64_t{1} << 30)) {
    fail("disk link", "chunk bytes", "expected a multiple of 4096 up to 1 GiB, got {}",
         d.options.chunk_bytes);
  }
  d.open_files();
  if (d.options.verify) d.compute_references();
  if (d.options.io != DiskIo::kPread) {
    const int rc =
        io_uring_queue_init(static_cast<unsigned>(d.options.queue_depth + 1), &d.ring, 0);
    if (rc == 0) {
      d.uring = true;
      d.wake_fd = ::eventfd(0, EFD_CLOEXEC);
      if (d.wake_fd < 0) fail("disk link", "eventfd", "cannot create ({})", errno_text(errno));
    } else if (d.options.io == DiskIo::kUring) {
      fail("disk link", "io_uring", "cannot create a ring ({})", errno_text(-rc));
    }
  }
  d.thread = std::thread([&d] {
    if (d.uring)
      d.run_uring();
    else
      d.run_pread();
  });
}

DiskLink::~DiskLink() {
  Impl& d = *impl_;
  d.stopping.store(true, std::memory_order_release);
  d.queue.close();
  d.wake();
  d.thread.join();
}

Ticket DiskLink::enqueue(const CopyRequest& copy) {
  Impl& d = *impl_;
  SM_ASSERT(copy.layer >= 0 && copy.layer < d.layout.layers() && copy.expert >= 0 &&
            copy.expert < d.layout.experts() && copy.slot >= 0 &&
            copy.slot < d.arena.slots_per_layer());
  if (d.done.failed()) d.done.completed();  // rethrows
  Ticket t = kNoTicket;
  {
    const std::lock_guard<std::mutex> lock(d.busy_mutex);
    const double at = d.now();
    if (d.busy_published == d.busy_enqueued) d.busy_since = at;  // idle until now
    t = d.queue.push(copy, at);
    d.busy_enqueued = t;
  }
  d.wake();
  return t;
}

Ticket DiskLink::completed() {
  return impl_->done.completed();
}
void DiskLink::wait(Ticket ticket) {
  impl_->done.wait(ticket);
}
double DiskLink::now() {
  return impl_->now();
}
bool DiskLink::uses_uring() const {
  return impl_->uring;
}
bool DiskLink::direct_refused() const {
  return impl_->direct_refused.load();
}
std::string DiskLink::mode() const {
  const bool any_direct = impl_->direct_at_open;
  return fmt::format("{}, {}", impl_->uring ? "io_uring" : "pread",
                     !any_direct        ? "buffered"
                     : direct_refused() ? "O_DIRECT (some files buffered)"
                                        : "O_DIRECT");
}
double DiskLink::busy_seconds() {
  Impl& d = *impl_;
  const std::lock_guard<std::mutex> lock(d.busy_mutex);
  return d.busy_total + (d.busy_published < d.busy_enqueued ? d.now() - d.busy_since : 0.0);
}

int64_t DiskLink::bytes_read() const {
  return impl_->bytes_read.load();
}
Ticket DiskLink::watermark() const {
  return impl_->done.watermark();
}
bool DiskLink::failed() const {
  return impl_->done.failed();
}
std::string DiskLink::error() const {
  return impl_->done.error();
}
const std::vector<uint64_t>& DiskLink::reference_checksums() const {
  return impl_->reference;
}

}  // namespace steermoe::link
