// Errors a user can act on. Every failure from bad input (a file, a flag, a request) is
// thrown as ridge::Error with a message naming what was wrong and where; never a crash.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace ridge {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ridge

// Checks of input validity: always on.
#define RIDGE_CHECK(cond, ...)             \
  do {                                     \
    if (!(cond)) ::ridge::fail(__VA_ARGS__); \
  } while (0)

// Internal invariants: on in debug / sanitizer builds only (RIDGE_DEBUG_CHECKS).
#ifdef RIDGE_DEBUG_CHECKS
#define RIDGE_ASSERT(cond)                                                              \
  do {                                                                                  \
    if (!(cond)) ::ridge::fail("internal invariant failed: {} ({}:{})", #cond, __FILE__, __LINE__); \
  } while (0)
#else
#define RIDGE_ASSERT(cond) ((void)0)
#endif
