// Shared helpers for the tokenizer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace steermoe::tokenizer::test {

// The llama.cpp tokenizer oracle, committed under tests/data/oracle/tokenizer.
inline std::filesystem::path oracle_path(const std::string& name) {
  return std::filesystem::path(STEERMOE_ORACLE_DIR) / "tokenizer" / name;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return std::move(buffer).str();
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh temporary folder per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("steermoe_tokenizer_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int value = 0;
    return value;
  }
  std::filesystem::path path_;
};

}  // namespace steermoe::tokenizer::test
