#pragma once
// On a GPU, collectives run on copy engines and the NIC and never wait for the SMs. CPU ranks
// share cores with compute instead: on the testbed (8 ranks on 2 cores) a ring's relay step or
// a gradient bucket waited a scheduler slice behind another rank's GEMM. The threads that only
// communicate (the executor's streams whose ops are all collectives: the token path's, the
// gradients') ask for a higher priority, to stand nearer to the hardware the simulator models.
// A hint: where the process may not raise a priority (no CAP_SYS_NICE), nothing changes.
namespace moecomm::rt {

inline constexpr const char* kCommThreadNiceVariable = "MOECOMM_COMM_THREAD_NICE";

// The niceness communication threads ask for: MOECOMM_COMM_THREAD_NICE, an integer in
// [-20, 19]; 0 when unset, which leaves them as they are. Throws Error naming the variable
// when it is anything else (commands check it at start, before any thread asks).
int comm_thread_nice();

// Sets the calling thread's niceness to MOECOMM_COMM_THREAD_NICE when it is set, valid and
// not 0; returns whether the thread now runs at it. Never throws: a refusal (EPERM) is
// reported once per process on stderr.
bool prioritize_comm_thread() noexcept;

}  // namespace moecomm::rt
