#pragma once
// User files carry units in the key's suffix with decimal prefixes (DESIGN.md); inside,
// everything is bytes, seconds, bytes/s and flop/s.
namespace moecomm::units {

inline constexpr double kGB = 1e9;
inline constexpr double kMB = 1e6;
inline constexpr double kUs = 1e-6;
inline constexpr double kMs = 1e-3;
inline constexpr double kTflops = 1e12;

inline constexpr double gbps_to_bytes_per_s(double gbps) {
  return gbps * kGB;
}
inline constexpr double gbit_to_bytes_per_s(double gbit) {
  return gbit * kGB / 8.0;
}

}  // namespace moecomm::units
