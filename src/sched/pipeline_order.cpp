#include "sched/pipeline_order.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::sched {

std::vector<int> split_layers(int layers, int parts, const std::string& where) {
  if (parts < 1) throw Error(where, "needs at least one pipeline stage");
  if (layers < parts)
    throw Error(where, std::to_string(layers) + " layers cannot fill " + std::to_string(parts) +
                           " pipeline stages (virtual stages under interleaved:V): every one "
                           "needs a layer");
  if (layers % parts == 0 || parts == 1) return std::vector<int>(parts, layers / parts);
  // Middle parts take ceil(L / parts); the ends share what is left, at least one each. With
  // too few layers for that, the middle ones take floor(L / parts) and the ends the rest.
  int middle = (layers + parts - 1) / parts;
  if (layers - (parts - 2) * middle < 2) middle = layers / parts;
  const int ends = layers - (parts - 2) * middle;
  std::vector<int> split(parts, middle);
  split.front() = ends / 2;
  split.back() = ends - ends / 2;
  if (parts == 2) {  // no middle: the last holds the LM head, the first the larger half
    split.front() = ends - ends / 2;
    split.back() = ends / 2;
  }
  return split;
}

std::vector<int> layer_offsets(const std::vector<int>& split) {
  std::vector<int> out(split.size() + 1, 0);
  for (size_t i = 0; i < split.size(); ++i) out[i + 1] = out[i] + split[i];
  return out;
}

namespace {

std::vector<PipelineTask> gpipe(int m) {
  std::vector<PipelineTask> out;
  for (int b = 0; b < m; ++b) out.push_back({Phase::kForward, b, 0});
  for (int b = 0; b < m; ++b) out.push_back({Phase::kBackward, b, 0});
  return out;
}

std::vector<PipelineTask> one_f_one_b(int stages, int stage, int m) {
  const int warmup = std::min(stages - stage - 1, m);
  std::vector<PipelineTask> out;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({Phase::kForward, f, 0});
  for (; f < m; ++f, ++b) {
    out.push_back({Phase::kForward, f, 0});
    out.push_back({Phase::kBackward, b, 0});
  }
  for (; b < m; ++b) out.push_back({Phase::kBackward, b, 0});
  return out;
}

// Megatron-Core's interleaved 1F1B: virtual micro-batch k runs model chunk (k / p) mod V of
// micro-batch (k / pV) p + k mod p (backwards over the chunks in reverse).
PipelineTask interleaved_task(int k, int stages, int chunks, bool forward) {
  const int group = stages * chunks;
  const int in_group = k % group;
  int chunk = in_group / stages;
  if (!forward) chunk = chunks - 1 - chunk;
  const int micro_batch = (k / group) * stages + in_group % stages;
  return {forward ? Phase::kForward : Phase::kBackward, micro_batch, chunk};
}

std::vector<PipelineTask> interleaved(int stages, int stage, int m, int chunks) {
  const int total = m * chunks;
  const int warmup = std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  std::vector<PipelineTask> out;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(interleaved_task(f, stages, chunks, true));
  for (; f < total; ++f, ++b) {
    out.push_back(interleaved_task(f, stages, chunks, true));
    out.push_back(interleaved_task(b, stages, chunks, false));
  }
  for (; b < total; ++b) out.push_back(interleaved_task(b, stages, chunks, false));
  return out;
}

}  // namespace

std::vector<PipelineTask> pipeline_order(const Strategy& s, int stages, int stage,
                                         int micro_batches, const std::string& where) {
  if (stages < 1 || stage < 0 || stage >= stages)
    throw Error(where, "stage " + std::to_string(stage) + " of " + std::to_string(stages));
  if (micro_batches < 1) throw Error(where, "needs at least one micro-batch");
  switch (s.pp_schedule) {
    case PpSchedule::kGpipe:
      return gpipe(micro_batches);
    case PpSchedule::k1F1B:
      return one_f_one_b(stages, stage, micro_batches);
    case PpSchedule::kInterleaved:
      if (micro_batches % stages != 0)
        throw Error(where, "interleaved:" + std::to_string(s.virtual_stages) + " needs the " +
                               "micro-batches (" + std::to_string(micro_batches) +
                               ") to be a multiple of pp (" + std::to_string(stages) + ")");
      return interleaved(stages, stage, micro_batches, s.virtual_stages);
  }
  throw Error(where, "unknown pipeline schedule");
}

}  // namespace moecomm::sched
