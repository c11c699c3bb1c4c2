#include "rt/thread_priority.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"

namespace moecomm::rt {
namespace {

// Sets MOECOMM_COMM_THREAD_NICE for one test (nullopt: unset) and puts it back after.
class NiceVariable {
 public:
  explicit NiceVariable(std::optional<std::string> value) {
    if (const char* old = std::getenv(kCommThreadNiceVariable)) old_ = old;
    if (value)
      setenv(kCommThreadNiceVariable, value->c_str(), 1);
    else
      unsetenv(kCommThreadNiceVariable);
  }
  ~NiceVariable() {
    if (old_)
      setenv(kCommThreadNiceVariable, old_->c_str(), 1);
    else
      unsetenv(kCommThreadNiceVariable);
  }

 private:
  std::optional<std::string> old_;
};

int this_thread_nice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

TEST(ThreadPriority, ReadsTheVariableAndNamesItWhenBad) {
  {
    const NiceVariable unset(std::nullopt);
    EXPECT_EQ(comm_thread_nice(), 0);
  }
  for (const auto& [text, nice] : {std::pair{"-10", -10}, {"19", 19}, {"-20", -20}, {"", 0}}) {
    const NiceVariable v(text);
    EXPECT_EQ(comm_thread_nice(), nice) << text;
  }
  for (const char* bad : {"x", "-21", "20", "5x", " 5", "1.5"}) {
    const NiceVariable v(bad);
    try {
      comm_thread_nice();
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MOECOMM_COMM_THREAD_NICE"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

// Only the calling thread changes (a higher niceness is allowed to anyone); unset or bad
// leaves it as it was, without throwing.
TEST(ThreadPriority, SetsTheCallingThreadOnly) {
  const int before = this_thread_nice();
  auto in_thread = [](std::optional<std::string> value) {
    const NiceVariable v(std::move(value));
    bool applied = false;
    int nice = 0;
    std::thread t([&] {
      applied = prioritize_comm_thread();
      nice = this_thread_nice();
    });
    t.join();
    return std::pair{applied, nice};
  };
  const int target = std::min(before + 3, 19);
  EXPECT_EQ(in_thread(std::to_string(target)), std::pair(true, target));
  EXPECT_EQ(this_thread_nice(), before);
  EXPECT_EQ(in_thread(std::nullopt), std::pair(false, before));
  EXPECT_EQ(in_thread("0"), std::pair(false, before));
  EXPECT_EQ(in_thread("bad"), std::pair(false, before));
}

}  // namespace
}  // namespace moecomm::rt
