#include "rt/config_fingerprint.h"

#include <array>
#include <cstdio>
#include <stdexcept>

#include "core/ffn_type_names.h"
#include "core/item_list.h"
#include "core/rank_groups.h"
#include "sched/strategy.h"

namespace moecomm::rt {

namespace {

std::string text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

std::string text(bool v) {
  return v ? "true" : "false";
}

template <typename Int>
std::string text(Int v) {
  return std::to_string(v);
}

std::string hex(uint64_t h, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(h));
  return buf;
}

std::string joined(const std::vector<int>& v, char sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + text(v[i]);
  return out;
}

// Files are compared by a digest: the message stays one line.
std::string corpus_digest(const std::vector<int>& ids) {
  if (ids.empty()) return "synthetic";
  std::string bytes;
  for (int id : ids) bytes += text(id) + ' ';
  return text(ids.size()) + " tokens, hash " + hex(fnv1a(bytes), 16);
}

std::string cluster_digest(const core::Cluster& c) {
  if (c.levels.empty()) return "none";
  return (c.name.empty() ? "unnamed" : c.name) + ", hash " +
         hex(fnv1a(core::cluster_to_json(c).dump()), 16);
}

// Each knob of the strategy as sched::to_string writes it (the --strategy text that re-runs
// it), so that a knob added there is compared here too. The name only labels the run.
void add_strategy(std::vector<Setting>& out, const sched::Strategy& s) {
  for (const std::string& item : core::split_items(sched::to_string(s), "strategy")) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq != std::string::npos && key != "name")
      out.push_back({"strategy: " + key, item.substr(eq + 1)});
  }
}

// "0", "1-3", "0, 2, 4-7".
std::string rank_list(const std::vector<int>& ranks) {
  return core::format_rank_ranges(ranks, ", ");
}

std::string shown(const std::string& value) {
  constexpr size_t kLongest = 48, kStart = 32;
  if (value.empty()) return "''";
  if (value.size() <= kLongest) return value;
  return value.substr(0, kStart) + "... (hash " + hex(fnv1a(value) >> 32, 8) + ")";
}

// Every rank's value of its setting `index`: the lengths, then the characters.
std::vector<std::string> gather_values(MPI_Comm comm, const std::vector<Setting>& settings,
                                       int index) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  const std::string mine =
      index < static_cast<int>(settings.size()) ? settings[static_cast<size_t>(index)].value : "";
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(world)), offsets(static_cast<size_t>(world));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < world; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += lengths[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                 MPI_CHAR, comm);
  std::vector<std::string> values;
  for (int r = 0; r < world; ++r)
    values.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  return values;
}

}  // namespace

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<Setting> train_settings(const TrainConfig& c) {
  const nn::MoeTransformerConfig& m = c.model;
  const nn::MoeLayerSpec& moe = m.moe;
  std::vector<Setting> out = {
      {"model: vocab", text(m.vocab)},
      {"model: max_seq", text(m.max_seq)},
      {"model: hidden", text(m.hidden)},
      {"model: heads", text(m.heads)},
      {"model: layers", text(m.layers)},
      {"model: ffn_hidden", text(moe.ffn_hidden)},
      {"model: experts", text(moe.experts)},
      {"gate", std::string(nn::to_string(moe.gate))},
      {"model: top_k", text(moe.top_k)},
      {"model: router_groups", text(moe.router_groups)},
      {"model: router_group_top_k", text(moe.router_group_top_k)},
      {"ffn_type", std::string(core::to_string(moe.ffn_type))},
      {"capacity_factor", text(moe.capacity_factor)},
      {"expert_choice_capacity", text(moe.expert_choice_capacity)},
      {"xmoe_dim", text(moe.xmoe_dim)},
      {"xmoe_temperature", text(moe.xmoe_temperature)},
      {"gate_noise", text(moe.gate_noise)},
      {"expert_spread", text(moe.expert_spread)},
      {"model: chunks_fwd", text(moe.chunks_fwd)},
      {"model: chunks_bwd", text(moe.chunks_bwd)},
      {"model: seed", text(m.seed)},
      {"model: layer seed", text(moe.seed)},
      {"aux_loss_weight", text(m.aux_loss_weight)},
      {"embedding_init_std", text(m.embedding_init_std)},
      {"head_init_std", text(m.head_init_std)},
      {"tp", text(c.tp)},
      {"ep", text(c.ep)},
      {"pp", text(c.pp)},
      {"micro_batches", text(c.micro_batches)},
      {"ranks_per_node", text(c.ranks_per_node)},
      {"cluster", cluster_digest(c.cluster)},
      {"hybrid_order", joined(c.hybrid_order, ',')},
  };
  add_strategy(out, c.strategy);
  const std::vector<Setting> rest = {
      {"batch", text(c.batch)},
      {"seq_len", text(c.seq_len)},
      {"steps", text(c.steps)},
      {"lr", text(c.lr)},
      {"seed", text(c.data_seed)},
      {"data", corpus_digest(c.corpus)},
      {"topics", text(c.topics)},
      {"text_order", text(c.text_order)},
      {"timeout_s", text(c.timeout_s)},
      {"record_routing", text(c.record_routing)},
      {"keep_gradients", text(c.keep_gradients)},
      {"trace_last_step", text(c.trace_last_step)},
      {"keep_op_times", text(c.keep_op_times)},
  };
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string disagreement(const std::string& name, const std::vector<std::string>& values) {
  std::vector<std::string> distinct;  // in the order of the first rank holding each
  std::vector<std::vector<int>> holders;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    size_t k = 0;
    while (k < distinct.size() && distinct[k] != values[static_cast<size_t>(r)]) ++k;
    if (k == distinct.size()) {
      distinct.push_back(values[static_cast<size_t>(r)]);
      holders.emplace_back();
    }
    holders[k].push_back(r);
  }
  std::string out = "ranks disagree on " + name + ":";
  for (size_t k = 0; k < distinct.size(); ++k) {
    const bool one = holders[k].size() == 1;
    out += std::string(k ? "," : "") + (one ? " rank " : " ranks ") + rank_list(holders[k]) +
           (one ? " has " : " have ") + shown(distinct[k]);
  }
  return out;
}

std::string compare_settings(MPI_Comm comm, const std::vector<Setting>& settings) {
  if (settings.size() > static_cast<size_t>(kMaxSettings))
    throw std::logic_error("compare_settings: " + std::to_string(settings.size()) +
                           " settings, more than " + std::to_string(kMaxSettings));
  int world = 1;
  MPI_Comm_size(comm, &world);
  // Name and value hashed together: a rank that lists other settings differs too. An unused
  // slot is 0 on every rank.
  std::array<uint64_t, kMaxSettings> mine{};
  for (size_t i = 0; i < settings.size(); ++i)
    mine[i] = fnv1a(settings[i].name + '\0' + settings[i].value);
  std::vector<uint64_t> all(static_cast<size_t>(world) * kMaxSettings);
  MPI_Allgather(mine.data(), kMaxSettings, MPI_UINT64_T, all.data(), kMaxSettings, MPI_UINT64_T,
                comm);
  std::vector<int> differ;
  for (int i = 0; i < kMaxSettings; ++i)
    for (int r = 1; r < world; ++r)
      if (all[static_cast<size_t>(r) * kMaxSettings + i] != all[static_cast<size_t>(i)]) {
        differ.push_back(i);
        break;
      }
  if (differ.empty()) return "";
  auto name = [&](int i) {
    return i < static_cast<int>(settings.size()) ? settings[static_cast<size_t>(i)].name
                                                 : "setting " + std::to_string(i);
  };
  std::string out = disagreement(name(differ[0]), gather_values(comm, settings, differ[0]));
  constexpr size_t kNamed = 4;  // further settings that differ, by name
  for (size_t k = 1; k < differ.size() && k <= kNamed; ++k)
    out += (k == 1 ? " (and on " : ", ") + name(differ[k]);
  if (differ.size() > kNamed + 1)
    out += " and " + std::to_string(differ.size() - kNamed - 1) + " more";
  if (differ.size() > 1) out += ")";
  return out;
}

}  // namespace moecomm::rt
