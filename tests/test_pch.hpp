// The precompiled header of every test target (tests/CMakeLists.txt): third-party and standard
// headers only, which no test configures with macros of its own. Each test file still includes
// what it uses; this only makes those includes cheap.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>
