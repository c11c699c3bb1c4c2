#include "rt/tp_streams.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "rt/thread_priority.h"
#include "rt/wait.h"

namespace moecomm::rt {
namespace {

// One run: per-(stage, chunk) completion flags, the cancel flag and the first failure.
class StreamRun {
 public:
  StreamRun(const std::vector<StageFn>& stages, int chunks, const std::atomic<bool>* outer)
      : stages_(stages),
        chunks_(chunks),
        done_(stages.size() * static_cast<size_t>(chunks), false),
        outer_(outer) {}

  void run_stream(const std::vector<Step>& steps, LinkBytes& bytes) {
    try {
      const StreamContext ctx{&bytes, &failed_};
      for (const Step& s : steps) {
        if (s.stage > 0) wait(s.stage - 1, s.chunk);
        stages_[static_cast<size_t>(s.stage)](s.chunk, ctx);
        signal(s.stage, s.chunk);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

  void fail(std::exception_ptr error) {
    {
      std::lock_guard lock(m_);
      if (!error_) error_ = error;  // the cause; later ones are mostly Cancelled
      failed_ = true;
    }
    cv_.notify_all();
  }

 private:
  size_t index(int stage, int chunk) const {
    return static_cast<size_t>(stage) * static_cast<size_t>(chunks_) + static_cast<size_t>(chunk);
  }

  bool cancelled() const { return failed_.load() || (outer_ && outer_->load()); }

  void wait(int stage, int chunk) {
    std::unique_lock lock(m_);
    // Timed: the outer flag is set by someone who does not notify this run.
    while (!done_[index(stage, chunk)]) {
      if (cancelled()) throw Cancelled("stream step cancelled: another stream failed");
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
  }

  void signal(int stage, int chunk) {
    {
      std::lock_guard lock(m_);
      done_[index(stage, chunk)] = true;
    }
    cv_.notify_all();
  }

  const std::vector<StageFn>& stages_;
  int chunks_;
  std::vector<bool> done_;
  const std::atomic<bool>* outer_;
  std::atomic<bool> failed_{false};
  std::mutex m_;
  std::condition_variable cv_;
  std::exception_ptr error_;
};

int chunks_of(const StreamOrder& order) {
  int n = 0;
  for (const auto& steps : order)
    for (const Step& s : steps) n = std::max(n, s.chunk + 1);
  return n;
}

}  // namespace

StreamOrder stage_major_order(const std::vector<int>& stream_of, int chunks) {
  int streams = 0;
  for (int s : stream_of) streams = std::max(streams, s + 1);
  StreamOrder order(static_cast<size_t>(streams));
  const int stages = static_cast<int>(stream_of.size());
  for (int first = 0; first < stages;) {  // a run of consecutive stages on one stream
    int last = first;
    while (last + 1 < stages && stream_of[last + 1] == stream_of[first]) ++last;
    auto& steps = order[static_cast<size_t>(stream_of[first])];
    for (int i = 0; i < chunks; ++i)
      for (int s = first; s <= last; ++s) steps.push_back({s, i});
    first = last + 1;
  }
  std::erase_if(order, [](const std::vector<Step>& steps) { return steps.empty(); });
  return order;
}

StreamOrder chunk_major_order(int stages, int chunks) {
  StreamOrder order(1);
  for (int i = 0; i < chunks; ++i)
    for (int s = 0; s < stages; ++s) order[0].push_back({s, i});
  return order;
}

void run_streams(const std::vector<StageFn>& stages, const StreamOrder& order,
                 const StreamContext& outer) {
  LinkBytes ignored;
  LinkBytes& total = outer.bytes ? *outer.bytes : ignored;
  if (order.size() == 1) {  // inline: the caller's context, exceptions pass straight up
    for (const Step& s : order[0]) stages[static_cast<size_t>(s.stage)](s.chunk, outer);
    return;
  }
  StreamRun run(stages, chunks_of(order), outer.cancel);
  std::vector<LinkBytes> bytes(order.size());
  std::vector<std::thread> threads;
  try {
    for (size_t st = 1; st < order.size(); ++st)
      threads.emplace_back([&, st] {
        prioritize_comm_thread();  // an extra stream stands for a copy engine or the NIC
        run.run_stream(order[st], bytes[st]);
      });
  } catch (...) {  // no thread: cancel the ones started, still join them
    run.fail(std::current_exception());
  }
  if (!order.empty()) run.run_stream(order[0], bytes[0]);
  for (std::thread& t : threads) t.join();
  for (const LinkBytes& b : bytes) total += b;
  run.rethrow();
}

}  // namespace moecomm::rt
