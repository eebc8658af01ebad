#include "common/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "common/error.hpp"

namespace steermoe {
namespace fs = std::filesystem;
namespace {

fs::path partial_name(const fs::path& path) {
  fs::path p = path;
  if (p.has_filename() == false) p = p.parent_path();  // "out/" -> "out"
  return fs::path(p.string() + ".partial-" + std::to_string(::getpid()));
}

fs::path strip_slash(const fs::path& path) {
  return path.has_filename() ? path : path.parent_path();
}

// "a character device", ... for an existing path that is not a regular file or a folder; ""
// otherwise (regular file, folder, nothing there).
std::string special_kind(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "";
}

void write_all(int fd, const fs::path& path, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail(path.string(), "output", "write failed ({})", std::strerror(saved));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail(path.string(), "output", "close failed ({})", std::strerror(errno));
}

}  // namespace

void create_output_directory(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    fail(dir.string(), "output", "cannot create the folder ({})",
         ec ? ec.message() : std::string("a file of that name is in the way"));
  }
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  if (!special_kind(path).empty()) {
    // A device or pipe: written where it is (O_TRUNC does nothing to it).
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path.string(), "output", "cannot open ({})", std::strerror(errno));
    write_all(fd, path, bytes);
    return;
  }
  StagedFile staged(path);
  const int fd = ::open(staged.temp_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail(path.string(), "output", "cannot create {} ({})", staged.temp_path().string(),
         std::strerror(errno));
  }
  write_all(fd, path, bytes);
  staged.commit();
}

void check_renamable_output(const fs::path& path) {
  const std::string kind = special_kind(path);
  if (!kind.empty()) {
    fail(path.string(), "output",
         "expected a regular file or a new name, found {} (this output is written under a "
         "temporary name and renamed into place, which would replace it)",
         kind);
  }
}

void check_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fail("stdout", "output", "write failed ({})",
         errno != 0 ? std::strerror(errno) : "an earlier write failed");
  }
}

namespace {
bool g_stdout_mid_line = false;  // the main thread's streamed text only
}  // namespace

void write_stdout_text(std::string_view bytes) {
  if (bytes.empty()) return;
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  g_stdout_mid_line = bytes.back() != '\n';
  check_stdout();
}

void end_stdout_line() {
  if (!g_stdout_mid_line) return;
  g_stdout_mid_line = false;
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

StagedFile::StagedFile(fs::path path) : path_(std::move(path)), temp_(partial_name(path_)) {
  check_renamable_output(path_);
  const fs::path parent = path_.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) {
      fail(path_.string(), "output", "the folder {} does not exist", parent.string());
    }
  }
}

StagedFile::~StagedFile() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temp_, ignored);
  }
}

void StagedFile::commit() {
  std::error_code ec;
  fs::rename(temp_, path_, ec);
  if (ec) {
    fail(path_.string(), "output", "cannot move {} into place ({})", temp_.string(), ec.message());
  }
  committed_ = true;
}

StagedDirectory::StagedDirectory(fs::path dir, std::string marker)
    : dir_(strip_slash(dir)), staging_(partial_name(dir_)), marker_(std::move(marker)) {
  std::error_code ec;
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) {
    fail(dir_.string(), "output", "expected a folder (or nothing), found a file");
  }
  fs::remove_all(staging_, ec);  // left by an earlier killed run with the same pid
  fs::create_directories(staging_, ec);
  if (ec) {
    fail(dir_.string(), "output", "cannot create the folder {} ({})", staging_.string(),
         ec.message());
  }
}

StagedDirectory::~StagedDirectory() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove_all(staging_, ignored);
  }
}

void StagedDirectory::commit() {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    const fs::path parent = dir_.parent_path();
    if (!parent.empty()) create_output_directory(parent);
    fs::rename(staging_, dir_, ec);
    if (ec) {
      fail(dir_.string(), "output", "cannot move {} into place ({})", staging_.string(),
           ec.message());
    }
    committed_ = true;
    return;
  }
  // Merge into the existing folder: marker out first, data files, marker in last.
  if (!marker_.empty()) fs::remove(dir_ / marker_, ec);
  for (const std::string& name : stale_) fs::remove(dir_ / name, ec);
  auto move = [&](const fs::path& from) {
    std::error_code err;
    fs::rename(from, dir_ / from.filename(), err);
    if (err) {
      fail(dir_.string(), "output", "cannot move {} into the folder ({})", from.string(),
           err.message());
    }
  };
  for (const auto& entry : fs::directory_iterator(staging_)) {
    if (entry.path().filename() != marker_) move(entry.path());
  }
  if (!marker_.empty() && fs::exists(staging_ / marker_, ec)) move(staging_ / marker_);
  fs::remove_all(staging_, ec);
  committed_ = true;
}

}  // namespace steermoe
