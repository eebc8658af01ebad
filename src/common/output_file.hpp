// Outputs that appear only when complete. Every output file or folder steermoe writes is
// written under a temporary name next to its final one and renamed into place by commit();
// destroyed without commit() (an error, an exception, Ctrl-C: interrupt.hpp), the temporary is
// removed, so no complete-looking partial output is ever left under the final name.
// Filesystem failures become steermoe::Error "<path>: output: ..." (never a raw
// std::filesystem::filesystem_error).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace steermoe {

// Writes `bytes` to `path` atomically (temporary file, rename). A path that names an existing
// device, FIFO or socket (/dev/stdout, /dev/full, a pipe) is written in place instead: renaming
// onto it would replace the device. Every write and the close are checked: Error
// "<path>: output: write failed (No space left on device)".
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Error "<path>: output: ..." when `path` exists and is not a regular file (a device, FIFO,
// socket or folder): for outputs written under a temporary name and renamed into place, which
// would replace it.
void check_renamable_output(const std::filesystem::path& path);

// Error "stdout: output: write failed (...)" if anything written to stdout could not be
// (a full disk, a closed pipe). Call once at the end, after the last write.
void check_stdout();

// Streamed text (run's prompt and tokens): written and flushed at once, checked as check_stdout
// does, and remembered whether it left stdout in the middle of a line.
void write_stdout_text(std::string_view bytes);
// Ends that line with a newline, if one was left open: an error reported on stderr after
// streamed text starts on a line of its own.
void end_stdout_line();

// Creates `dir` and its parents; Error "<dir>: output: cannot create the folder (...)" when it
// cannot (a file is in the way, no permission, ...).
void create_output_directory(const std::filesystem::path& dir);

// A file written as "<path>.partial-<pid>" and renamed onto `path` by commit().
class StagedFile {
 public:
  explicit StagedFile(std::filesystem::path path);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& path() const { return path_; }
  void commit();

 private:
  std::filesystem::path path_, temp_;
  bool committed_ = false;
};

// A folder built as "<dir>.partial-<pid>" and moved onto `dir` by commit(). If `dir` already
// exists its files of the same names are replaced, the ones named in `marker` (e.g.
// "meta.json": what makes the folder look complete) last, after removing the old marker first.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::filesystem::path dir, std::string marker = {});
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  // Where to write the folder's files now.
  const std::filesystem::path& staging() const { return staging_; }
  const std::filesystem::path& final_path() const { return dir_; }
  // Removes `name` from the final folder at commit (a stale file a new output must not keep).
  void remove_at_commit(std::string name) { stale_.push_back(std::move(name)); }
  void commit();

 private:
  std::filesystem::path dir_, staging_;
  std::string marker_;
  std::vector<std::string> stale_;
  bool committed_ = false;
};

}  // namespace steermoe
