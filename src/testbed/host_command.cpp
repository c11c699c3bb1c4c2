#include "testbed/host_command.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "core/error.h"

extern char** environ;

namespace moecomm::testbed {

namespace {

using Clock = std::chrono::steady_clock;

// How long a program gets between SIGTERM and SIGKILL once its time is up (mpirun uses it
// to stop its daemons and ranks on the other nodes).
constexpr double kTermGraceSeconds = 3.0;
// How long output is still read after the program exited while something it started
// keeps the pipe open.
constexpr double kDrainSeconds = 1.0;
// Characters a shell reads as themselves, so a word made of them needs no quotes.
constexpr const char* kShellSafe =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,:/@%";
// How long killed processes get to disappear.
constexpr double kKillWaitSeconds = 5.0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// name=value strings: ours, with `overrides` replacing or adding entries.
std::vector<std::string> environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : overrides) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Parent of every process, from /proc/<pid>/stat (the field after the parenthesised name,
// which may itself hold spaces and parentheses).
std::map<int, int> parents() {
  std::map<int, int> parent;
  DIR* dir = opendir("/proc");
  if (!dir) return parent;
  while (dirent* e = readdir(dir)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(f, stat);
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    int ppid = 0;
    if (rest >> state >> ppid) parent[pid] = ppid;
  }
  closedir(dir);
  return parent;
}

std::set<int> process_tree(int root) {
  const std::map<int, int> parent = parents();
  std::set<int> tree = {root};
  for (bool grew = true; grew;) {  // a fixed point: the tree is a few dozen processes
    grew = false;
    for (const auto& [pid, ppid] : parent) {
      if (tree.count(ppid) && tree.insert(pid).second) grew = true;
    }
  }
  return tree;
}

// The child side of fork: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, int out_fd,
                             int err_fd, int errno_fd, const CommandOptions& options) {
  if (options.own_process_group) setpgid(0, 0);
  if (options.parent_death_signal != 0) prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!options.inherit_stdin) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
  }
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  execve(path, argv, envp);
  const int e = errno;
  (void)!write(errno_fd, &e, sizeof e);
  _exit(127);
}

// Whether `pid` has exited: gone, or a zombie that its parent has yet to reap.
bool exited(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z';
}

int decode_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 255;
}

// Reads whatever is ready on the two pipes into the result or the streams; closes a pipe
// (sets it to -1) at end of file.
void pump(int fds[2], int wait_ms, const CommandOptions& options, CommandResult& result) {
  pollfd polls[2];
  int n = 0;
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0) polls[n++] = {fds[i], POLLIN, 0};
  }
  if (n == 0) {  // both pipes closed: just wait for the program to exit
    poll(nullptr, 0, wait_ms);
    return;
  }
  if (poll(polls, n, wait_ms) <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (!(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    const ssize_t got = read(polls[i].fd, buf, sizeof buf);
    const int which = polls[i].fd == fds[0] ? 0 : 1;
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      close(fds[which]);
      fds[which] = -1;
      continue;
    }
    std::ostream* stream = which == 0 ? options.out : options.err;
    if (stream) {
      stream->write(buf, got);
      stream->flush();
    } else {
      (which == 0 ? result.out : result.err).append(buf, got);
    }
  }
}

// SIGTERM to the program and all below it, a grace period, then SIGKILL to all of them
// (those that were below it too, in case they were orphaned meanwhile).
int stop_tree(pid_t pid, int fds[2], const CommandOptions& options, CommandResult& result) {
  std::set<int> tree = process_tree(pid);
  for (int p : tree) kill(p, SIGTERM);
  const auto start = Clock::now();
  int wstatus = 0;
  while (seconds_since(start) < kTermGraceSeconds) {
    if (waitpid(pid, &wstatus, WNOHANG) == pid) break;
    pump(fds, 50, options, result);
  }
  for (int p : process_tree(pid)) tree.insert(p);
  for (int p : tree) kill(p, SIGKILL);
  if (options.own_process_group) kill(-pid, SIGKILL);
  waitpid(pid, &wstatus, 0);
  // SIGKILL is asynchronous: wait until the others have really exited, so that the caller
  // finds none of them still running (as `ip netns pids` would show).
  const auto killed_at = Clock::now();
  for (int p : tree) {
    while (!exited(p) && seconds_since(killed_at) < kKillWaitSeconds) {
      pump(fds, 10, options, result);
    }
  }
  return decode_status(wstatus);
}

}  // namespace

std::string find_program(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), X_OK) == 0 ? program : "";
  }
  const char* path = std::getenv("PATH");
  // ip and tc live in /usr/sbin, which a user's PATH may lack.
  std::istringstream dirs(std::string(path ? path : "/usr/local/bin:/usr/bin:/bin") +
                          ":/usr/sbin:/sbin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(kShellSafe) == std::string::npos;
    if (plain) {
      line += word;
      continue;
    }
    line += '\'';
    for (char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

CommandResult run_command(const std::vector<std::string>& argv, const CommandOptions& options) {
  if (argv.empty()) throw Error("run_command: empty command");
  const std::string path = find_program(argv[0]);
  if (path.empty()) throw Error("cannot run '" + argv[0] + "': not found on PATH");
  std::vector<std::string> args = argv, env = environment(options.env);
  std::vector<char*> c_args = c_strings(args), c_env = c_strings(env);

  int out_pipe[2], err_pipe[2], errno_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(errno_pipe, O_CLOEXEC) != 0) {
    throw Error("cannot run '" + argv[0] + "': pipe: " + std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd :
         {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], errno_pipe[0], errno_pipe[1]}) {
      close(fd);
    }
    throw Error("cannot run '" + argv[0] + "': fork: " + std::strerror(e));
  }
  if (pid == 0) {
    exec_child(path.c_str(), c_args.data(), c_env.data(), out_pipe[1], err_pipe[1], errno_pipe[1],
               options);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(errno_pipe[1]);
  int exec_errno = 0;
  const bool exec_failed = read(errno_pipe[0], &exec_errno, sizeof exec_errno) > 0;
  close(errno_pipe[0]);
  int fds[2] = {out_pipe[0], err_pipe[0]};
  CommandResult result;
  if (exec_failed) {
    waitpid(pid, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
    throw Error("cannot run '" + path + "': " + std::strerror(exec_errno));
  }

  const auto start = Clock::now();
  bool exited = false;
  Clock::time_point exited_at;
  int wstatus = 0;
  while (fds[0] >= 0 || fds[1] >= 0 || !exited) {
    if (!exited && options.timeout_s > 0 && seconds_since(start) >= options.timeout_s) {
      result.timed_out = true;
      result.status = stop_tree(pid, fds, options, result);
      exited = true;
      break;
    }
    pump(fds, 100, options, result);
    if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
      exited = true;
      exited_at = Clock::now();
      result.status = decode_status(wstatus);
    }
    if (exited && seconds_since(exited_at) > kDrainSeconds) break;
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return result;
}

}  // namespace moecomm::testbed
