#pragma once
// The hang test (a rank that stops sending makes the job fail with a message naming the
// op, within the timeout): the last rank stalls in a kernel before the dispatch
// A2A; the others must time out and the job must exit non-zero.

namespace moecomm::rt::test {

inline constexpr double kHangTimeout = 2;  // seconds; the stalled rank sleeps far longer

int hang_scenario();

}  // namespace moecomm::rt::test
