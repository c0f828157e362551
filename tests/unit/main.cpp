// The test binary's main: GoogleTest's, with a scratch directory of this process's own.
// ctest runs each case as its own process, two at once in the sanitizer stage
// (scripts/test.sh), and many cases write fixed names under testing::TempDir() (one
// model file per preset or architecture): a directory per process keeps two cases from
// writing one file at the same time, and a run leaves nothing behind.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (!base || !*base) base = std::getenv("TMPDIR");
  std::string dir = std::string(base && *base ? base : "/tmp") + "/ridge-tests.XXXXXX";
  if (!mkdtemp(dir.data())) {
    std::perror(("ridge_tests: cannot make a scratch directory " + dir).c_str());
    return 2;
  }
  // GoogleTest's TempDir() reads TEST_TMPDIR; std::filesystem::temp_directory_path() and
  // the programs a case starts read TMPDIR.
  setenv("TEST_TMPDIR", dir.c_str(), 1);
  setenv("TMPDIR", dir.c_str(), 1);
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
