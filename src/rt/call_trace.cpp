#include "rt/call_trace.h"

#include <nlohmann/json.hpp>

#include "rt/comm.h"

namespace moecomm::rt {

void CallTrace::arm(int rank) {
  std::lock_guard lock(mu_);
  rank_ = rank;
  origin_ = Clock::now();
  threads_ = {{std::this_thread::get_id(), 0}};
  events_.clear();
  armed_ = true;
}

void CallTrace::disarm() {
  armed_ = false;
}

void CallTrace::record(const std::string& label, const std::string& what, Clock::time_point begin,
                       Clock::time_point end) {
  if (!armed()) return;
  std::lock_guard lock(mu_);
  const int thread =
      threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size())).first->second;
  const auto since = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - origin_).count();
  };
  events_.push_back({rank_, thread, label, what, since(begin), since(end)});
}

std::vector<CallEvent> CallTrace::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

namespace {

std::string pack(const std::vector<CallEvent>& events) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CallEvent& e : events)
    rows.push_back({e.rank, e.thread, e.label, e.what, e.begin_s, e.end_s});
  return rows.dump();
}

void unpack(const std::string& text, std::vector<CallEvent>& out) {
  for (const nlohmann::json& r : nlohmann::json::parse(text))
    out.push_back({r[0].get<int>(), r[1].get<int>(), r[2].get<std::string>(),
                   r[3].get<std::string>(), r[4].get<double>(), r[5].get<double>()});
}

}  // namespace

std::vector<CallEvent> gather_call_events(const std::vector<CallEvent>& mine, MPI_Comm comm,
                                          int root) {
  int me = 0, ranks = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &ranks);
  const std::string text = pack(mine);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<size_t>(ranks)), offsets(static_cast<size_t>(ranks));
  check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm), "MPI_Gather");
  std::string all;
  if (me == root) {
    int total = 0;
    for (int r = 0; r < ranks; ++r) {
      offsets[static_cast<size_t>(r)] = total;
      total += lengths[static_cast<size_t>(r)];
    }
    all.resize(static_cast<size_t>(total));
  }
  check_mpi(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                        MPI_CHAR, root, comm),
            "MPI_Gatherv");
  std::vector<CallEvent> out;
  if (me != root) return out;
  for (int r = 0; r < ranks; ++r)
    unpack(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                      static_cast<size_t>(lengths[static_cast<size_t>(r)])),
           out);
  return out;
}

}  // namespace moecomm::rt
