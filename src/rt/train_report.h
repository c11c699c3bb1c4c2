#pragma once
// What `moecomm train` does around a step (scheduled_train.h runs the step): draw the batch,
// add up the step's report over the ranks, record the routing and the samples' losses.
#include <cstdint>
#include <vector>

#include "nn/moe_transformer.h"
#include "nn/synthetic_text.h"
#include "place/routing_trace.h"
#include "rt/link_bytes.h"
#include "rt/train_groups.h"
#include "rt/train_loop.h"

namespace moecomm::rt {

// This process's MPI_COMM_WORLD size and rank.
int world_size();
int world_rank();

// Windows of the corpus, drawn by (seed, step, rank, b).
nn::TextBatch corpus_batch(const std::vector<int>& corpus, int batch, int seq_len, uint64_t seed,
                           uint64_t step, int rank);
// This rank's routing of one MoE layer as [batch][seq][k], gathered to rank 0.
// Under TP the members of a TP group hold the same samples: only TP index 0's are kept.
void record(const nn::MoeLayer& layer, int batch, int seq_len, int world, int tp, int me,
            place::LayerRouting& out);
// Every sample's loss and holder, by global sample id, on every rank.
void gather_samples(const nn::MoeTransformer& model, const TrainGroups& g, bool moved, int batch,
                    int world, TrainResult& out);
// What every rank adds up after a step. Collective over MPI_COMM_WORLD.
StepReport step_report(int step, float loss, float lm_loss, double ms, const LinkBytes& token,
                       const LinkBytes& grad, const GradSyncStats& stats, int world);
// Every rank's rows to each EP member (summed over `layers` dispatches) -> per EP group the
// mean dispatch's n x n byte matrix (TrainResult::dispatch_bytes). Collective over the world.
std::vector<std::vector<double>> ep_matrices(const std::vector<int64_t>& rows, int64_t layers,
                                             double row_bytes, const TrainGroups& g, int world);
// Busy seconds of this rank -> the step's means over ranks, in ms.
void add_phase_times(StepReport& r, double token_fwd_s, double token_bwd_s, double grad_s,
                     int world);

}  // namespace moecomm::rt
