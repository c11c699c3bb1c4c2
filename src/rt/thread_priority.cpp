#include "rt/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "core/error.h"

namespace moecomm::rt {
namespace {

// nullopt: set but not an integer in [-20, 19]; 0 when unset or empty.
std::optional<int> parse_nice(const char* text) {
  if (!text || !*text) return 0;
  const char* end = text + std::strlen(text);
  int nice = 0;
  const auto [ptr, ec] = std::from_chars(text, end, nice);
  if (ec != std::errc() || ptr != end || nice < -20 || nice > 19) return std::nullopt;
  return nice;
}

}  // namespace

int comm_thread_nice() {
  const char* text = std::getenv(kCommThreadNiceVariable);
  const std::optional<int> nice = parse_nice(text);
  if (!nice) {
    throw Error(kCommThreadNiceVariable,
                std::string("must be an integer in [-20, 19], got '") + text + "'");
  }
  return *nice;
}

bool prioritize_comm_thread() noexcept {
  const int nice = parse_nice(std::getenv(kCommThreadNiceVariable)).value_or(0);
  if (nice == 0) return false;
  // Linux: PRIO_PROCESS with a thread id sets that thread's niceness alone.
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, nice) == 0) return true;
  const int error = errno;
  static std::once_flag reported;
  std::call_once(reported, [&] {
    std::fprintf(stderr, "note: %s=%d not applied to the communication threads: %s\n",
                 kCommThreadNiceVariable, nice, std::strerror(error));
  });
  return false;
}

}  // namespace moecomm::rt
