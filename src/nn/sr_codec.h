#pragma once
// HybridEP's shared + residual (SR) expert compression (HybridEP Sec. IV-B, Fig. 9). An expert
// travels to other GPUs as the top-k entries of its residual r = w - s against the shared
// expert s (the average of the layer's experts), in value-index format; the receiver restores
// s + r in one fused pass. An empty `shared` means s = 0: HybridEP "w/o S", which compresses
// the expert itself.
//
// Wire layout (sr_encoded_bytes(k) = 8 k bytes, host byte order, no alignment required):
//   bytes [0, 4k)   k fp32 residual values r[index[j]]
//   bytes [4k, 8k)  k int32 indices, strictly increasing, in [0, numel)
// Every rank's encoding of equal-size tensors at equal k has the same size, so the runtime can
// exchange them with one MPI_Allgather of MPI_BYTE.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moecomm::nn {

// Entries kept for numel fp32 values at `compression` = encoded bytes / dense fp32 bytes
// (Strategy::compression; HybridEP's "50x" is 0.02). A kept entry costs 8 bytes against 4 per
// dense value, so k = floor(compression * numel / 2) (within a 1e-12 relative slack, so
// that 0.58 of 100 values keeps 29 despite binary rounding), clamped to [1, numel].
// Throws Error unless 0 < compression <= 1 and 1 <= numel <= INT32_MAX.
int64_t sr_kept(int64_t numel, double compression);

// 8 k: k fp32 values then k int32 indices. Throws Error on k < 1.
int64_t sr_encoded_bytes(int64_t k);

// Writes the k entries of largest |w - s| into `encoded` (exactly sr_encoded_bytes(k) bytes),
// in increasing index order. |r| is ranked by its bit pattern: IEEE order for numbers, NaN
// above inf; ties go to the lower index, so every rank encodes the same bytes. O(numel):
// a histogram of |r|'s top bits finds the bucket of the k-th largest, std::nth_element within
// it the k-th itself, one scan collects the k. `shared` is empty (s = 0) or has
// weights.size() values. Throws Error on size mismatches or k outside [1, weights.size()].
void sr_encode(std::span<const float> weights, std::span<const float> shared, int64_t k,
               std::span<std::byte> encoded);
std::vector<std::byte> sr_encode(std::span<const float> weights, std::span<const float> shared,
                                 int64_t k);

// out = s everywhere plus the kept residual values at their indices, in one pass (w/o S: the
// kept values themselves, 0 elsewhere). Not bit-exact against w where both parts are kept:
// s + fl(w - s) rounds twice, so |out - w| <= 2^-24 (|w - s| + |w|) (1 + 2^-24) while w - s
// is finite; exact where s = 0 or s/2 <= w <= 2s (Sterbenz). The buffer is validated before `out`
// is written: its size a positive multiple of 8 with k <= out.size(), indices strictly increasing
// and in range, shared.size() == out.size() when `shared` is non-empty; otherwise throws Error.
void sr_decode(std::span<const std::byte> encoded, std::span<const float> shared,
               std::span<float> out);

}  // namespace moecomm::nn
