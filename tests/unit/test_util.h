// Shared helpers for the unit tests: where ../shared is, and the skip-or-fail rule.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ridge::test {

inline std::string shared_dir() {
  if (const char* e = std::getenv("RIDGE_SHARED_DIR")) return e;
  return std::string(RIDGE_SOURCE_DIR) + "/../shared";
}

inline bool under_ci() {
  const char* e = std::getenv("CI");
  return e && std::string(e) == "true";
}

// A real-model file from ../shared; absent: a visible skip, or a failure under CI=true
// (CI must never pass with no real-model test run).
#define RIDGE_REQUIRE_SHARED(path_var, rel)                                                   \
  const std::string path_var = ::ridge::test::shared_dir() + "/" + (rel);                     \
  if (!std::filesystem::exists(path_var)) {                                                   \
    if (::ridge::test::under_ci()) FAIL() << "missing " << path_var << " (required under CI=true)"; \
    GTEST_SKIP() << "SKIP: " << path_var << " not found";                                     \
  }

}  // namespace ridge::test
