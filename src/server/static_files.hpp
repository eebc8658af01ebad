// The chat page's files (src/server/static/), embedded at build time by CMakeLists.txt.
#pragma once

#include <span>
#include <string_view>

namespace steermoe::server {

struct StaticFile {
  std::string_view path;  // "/index.html"
  std::string_view content_type;
  std::string_view body;
};

std::span<const StaticFile> static_files();

}  // namespace steermoe::server
