#pragma once
// A shaped link of the testbed, as the user writes it: "RATE[,LATENCY]" (`--node-link
// 200mbit`, `--dc-link 1gbit,5ms`). Rates follow tc's spelling where it is unambiguous: a
// `bit` suffix means bits per second, `Bps` (or `B/s`) bytes per second, prefixes k, M, G, T
// are decimal (1 Mbit = 1e6 bit). tc's own `mbps` means megaBYTES per second while most
// people read it as megabits, so `bps` in lower case is refused as ambiguous. Latencies are
// `s`, `ms` or `us`. Internally: bytes per second and seconds (DESIGN.md "Units").
#include <string>

namespace moecomm::testbed {

struct LinkSpec {
  double rate_Bps = 0;   // bytes per second, > 0
  double latency_s = 0;  // one-way latency the link adds; 0 = none asked
  std::string text;      // as the user wrote it, for messages and the state file
};

// `flag` names the option in errors: "--node-link: '200mbps': ...".
double parse_rate(const std::string& text, const std::string& flag);
double parse_latency(const std::string& text, const std::string& flag);
LinkSpec parse_link(const std::string& text, const std::string& flag);

// For people: "200 Mbit/s", "1.5 Gbit/s", "5 ms", "100 us".
std::string format_rate(double rate_Bps);
std::string format_latency(double latency_s);

// For tc: the rate as whole bits per second ("200000000bit"); a latency as whole
// microseconds ("2500us").
std::string tc_rate(double rate_Bps);
std::string tc_time(double seconds);

// A number as the shortest decimal that reads back the same ("25000000", "0.125").
std::string format_number(double value);

}  // namespace moecomm::testbed
