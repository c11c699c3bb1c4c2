// Model files (--model FILE): parse_model, its "parallel" resolved against the world its sizes
// name as the CLI resolves it, and model_to_json read back.
#include <cstddef>
#include <cstdint>

#include "core/json_reader.h"
#include "core/model_config.h"
#include "fuzz_check.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parsed = fuzz::accepted([&] {
    return core::parse_model(core::parse_json_text(fuzz::text_of(data, size), "m.json"), "m.json");
  });
  if (!parsed) return 0;
  const core::ModelConfig& model = *parsed;
  const std::string written = core::model_to_json(model).dump();
  const core::ModelConfig back = fuzz::must("written model reads back", [&] {
    return core::parse_model(core::parse_json_text(written, "written"), "written");
  });
  if (core::model_to_json(back).dump() != written)
    fuzz::fail("model changed through model_to_json: " + written);
  if (model.parallel) {
    const core::ParallelSpec& p = *model.parallel;
    const int64_t world =
        int64_t{p.tp.value_or(1)} * p.cp.value_or(1) * p.dp.value_or(1) * p.pp.value_or(1);
    if (world > core::kMaxParallelSize) return 0;
    fuzz::accepted([&] {
      const core::ParallelConfig c =
          core::resolve_parallel(p, static_cast<int>(world), static_cast<int>(model.experts), "p");
      core::check_parallel_fits_model(c, model, "p");
      return true;
    });
  }
  return 0;
}
