#include "testbed/link_spec.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/error.h"

namespace moecomm::testbed {

namespace {

// Bounds that catch typos rather than limit use: below 1 kB/s nothing MoE-sized moves, and
// tc's rates are 64-bit byte counts, far above 10 Tbit/s.
constexpr double kMinRateBps = 1e3;
constexpr double kMaxRateBps = 1.25e12;
constexpr double kMaxLatency = 10.0;

std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// Splits "1.5GBps" into 1.5 and "GBps"; false when it does not start with a plain decimal
// number (no sign, no exponent, no spaces).
bool split_number(const std::string& text, double& value, std::string& unit) {
  std::size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  if (end == 0) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (ec != std::errc() || ptr != text.data() + end) return false;
  unit = text.substr(end);
  return true;
}

double decimal_prefix(char c) {
  switch (c) {
    case 'k':
    case 'K':
      return 1e3;
    case 'm':
    case 'M':
      return 1e6;
    case 'g':
    case 'G':
      return 1e9;
    case 't':
    case 'T':
      return 1e12;
    default:
      return 0;
  }
}

// Bytes per second of one unit ("Mbit" -> 125000), 0 when unknown. `ambiguous` is set for
// tc's "mbps" family.
double rate_unit(const std::string& unit, bool& ambiguous) {
  ambiguous = false;
  std::string rest = unit;
  double scale = 1;
  if (!rest.empty() && decimal_prefix(rest[0]) != 0 && rest.size() > 1) {
    scale = decimal_prefix(rest[0]);
    rest = rest.substr(1);
  }
  if (rest == "bit" || rest == "bit/s") return scale / 8;
  if (rest == "Bps" || rest == "B/s") return scale;
  if (rest == "bps") ambiguous = true;
  return 0;
}

}  // namespace

double parse_rate(const std::string& text, const std::string& flag) {
  const std::string where = flag + ": rate " + quoted(text);
  double value = 0;
  std::string unit;
  if (!split_number(text, value, unit)) {
    throw Error(where, "expected a number and a unit, e.g. 200mbit, 1gbit, 25MBps");
  }
  if (unit.empty()) {
    throw Error(where, "needs a unit: bit (bits/s, e.g. 200mbit) or Bps (bytes/s, e.g. 25MBps)");
  }
  bool ambiguous = false;
  const double scale = rate_unit(unit, ambiguous);
  if (ambiguous) {
    throw Error(where, "'" + unit +
                           "' is ambiguous (tc reads it as bytes/s, most people as bits/s); "
                           "write bit for bits/s (200mbit) or Bps for bytes/s (25MBps)");
  }
  if (scale == 0) {
    throw Error(where, "unknown unit '" + unit +
                           "'; use [k|M|G|T]bit for bits/s or [k|M|G|T]Bps for bytes/s");
  }
  const double rate = value * scale;
  if (!(rate >= kMinRateBps && rate <= kMaxRateBps)) {
    throw Error(where, "must be between 8kbit and 10Tbit per second");
  }
  return rate;
}

double parse_latency(const std::string& text, const std::string& flag) {
  const std::string where = flag + ": latency " + quoted(text);
  double value = 0;
  std::string unit;
  if (!split_number(text, value, unit)) {
    throw Error(where, "expected a number and a unit, e.g. 5ms, 100us, 1s");
  }
  double scale = 0;
  if (unit == "s") scale = 1;
  if (unit == "ms") scale = 1e-3;
  if (unit == "us") scale = 1e-6;
  if (scale == 0) throw Error(where, "unit must be s, ms or us");
  const double latency = value * scale;
  if (!(latency >= 1e-6 && latency <= kMaxLatency)) {
    throw Error(where, "must be between 1us and 10s");
  }
  return latency;
}

LinkSpec parse_link(const std::string& text, const std::string& flag) {
  LinkSpec link;
  link.text = text;
  const std::size_t comma = text.find(',');
  link.rate_Bps = parse_rate(text.substr(0, comma), flag);
  if (comma != std::string::npos) link.latency_s = parse_latency(text.substr(comma + 1), flag);
  return link;
}

std::string format_number(double value) {
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // %g switches to exponents for large integers; whole numbers read better in full.
  if (value == std::floor(value) && std::fabs(value) < 1e18) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  }
  return buf;
}

std::string format_rate(double rate_Bps) {
  const double bits = rate_Bps * 8;
  const std::vector<std::pair<double, const char*>> units = {
      {1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}};
  for (const auto& [scale, name] : units) {
    if (bits >= scale) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g %s", bits / scale, name);
      return buf;
    }
  }
  return format_number(bits) + " bit/s";
}

std::string format_latency(double latency_s) {
  char buf[64];
  if (latency_s >= 1) {
    std::snprintf(buf, sizeof buf, "%.4g s", latency_s);
  } else if (latency_s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.4g ms", latency_s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g us", latency_s * 1e6);
  }
  return buf;
}

std::string tc_rate(double rate_Bps) {
  return format_number(std::round(rate_Bps * 8)) + "bit";
}

std::string tc_time(double seconds) {
  return format_number(std::round(seconds * 1e6)) + "us";
}

}  // namespace moecomm::testbed
