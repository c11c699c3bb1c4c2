#include "testbed/link_spec.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::testbed {
namespace {

TEST(TestbedLinkSpec, RatesInBitsAndBytesPerSecond) {
  EXPECT_DOUBLE_EQ(parse_rate("200mbit", "--node-link"), 25e6);
  EXPECT_DOUBLE_EQ(parse_rate("1gbit", "--node-link"), 125e6);
  EXPECT_DOUBLE_EQ(parse_rate("500kbit", "--node-link"), 62500);
  EXPECT_DOUBLE_EQ(parse_rate("25MBps", "--node-link"), 25e6);
  EXPECT_DOUBLE_EQ(parse_rate("1.5GBps", "--node-link"), 1.5e9);
  EXPECT_DOUBLE_EQ(parse_rate("100Mbit", "--node-link"), 12.5e6);  // prefixes in any case
  EXPECT_DOUBLE_EQ(parse_rate("100Mbit/s", "--node-link"), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_rate("40GB/s", "--node-link"), 40e9);
  EXPECT_DOUBLE_EQ(parse_rate("8000bit", "--node-link"), 1000);    // the smallest allowed
  EXPECT_DOUBLE_EQ(parse_rate("10Tbit", "--node-link"), 1.25e12);  // the largest allowed
}

TEST(TestbedLinkSpec, BadRatesNameTheFlagAndSayWhy) {
  EXPECT_ERROR_HAS(parse_rate("200mbps", "--node-link"), "--node-link", "'200mbps'", "ambiguous",
                   "200mbit", "25MBps");
  EXPECT_ERROR_HAS(parse_rate("200", "--dc-link"), "--dc-link", "needs a unit");
  EXPECT_ERROR_HAS(parse_rate("", "--node-link"), "--node-link", "expected a number");
  EXPECT_ERROR_HAS(parse_rate("mbit", "--node-link"), "expected a number");
  EXPECT_ERROR_HAS(parse_rate("-5mbit", "--node-link"), "expected a number");
  EXPECT_ERROR_HAS(parse_rate("200 mbit", "--node-link"), "unknown unit ' mbit'");
  EXPECT_ERROR_HAS(parse_rate("1e9bit", "--node-link"), "unknown unit 'e9bit'");
  EXPECT_ERROR_HAS(parse_rate("200xbit", "--node-link"), "unknown unit 'xbit'");
  EXPECT_ERROR_HAS(parse_rate("1.2.3mbit", "--node-link"), "expected a number");
  EXPECT_ERROR_HAS(parse_rate("200MiBps", "--node-link"), "unknown unit 'MiBps'");
  EXPECT_ERROR_HAS(parse_rate("0mbit", "--node-link"), "between 8kbit and 10Tbit");
  EXPECT_ERROR_HAS(parse_rate("7999bit", "--node-link"), "between 8kbit and 10Tbit");
  EXPECT_ERROR_HAS(parse_rate("11Tbit", "--node-link"), "between 8kbit and 10Tbit");
}

TEST(TestbedLinkSpec, Latencies) {
  EXPECT_DOUBLE_EQ(parse_latency("5ms", "--node-link"), 0.005);
  EXPECT_DOUBLE_EQ(parse_latency("100us", "--node-link"), 1e-4);
  EXPECT_DOUBLE_EQ(parse_latency("1s", "--node-link"), 1);
  EXPECT_DOUBLE_EQ(parse_latency("0.5ms", "--node-link"), 5e-4);
  EXPECT_ERROR_HAS(parse_latency("5", "--node-link"), "--node-link", "'5'", "s, ms or us");
  EXPECT_ERROR_HAS(parse_latency("5min", "--node-link"), "s, ms or us");
  EXPECT_ERROR_HAS(parse_latency("5 ms", "--node-link"), "s, ms or us");
  EXPECT_ERROR_HAS(parse_latency("ms", "--node-link"), "expected a number");
  EXPECT_ERROR_HAS(parse_latency("0ms", "--node-link"), "between 1us and 10s");
  EXPECT_ERROR_HAS(parse_latency("11s", "--node-link"), "between 1us and 10s");
}

TEST(TestbedLinkSpec, LinkIsARateAndAnOptionalLatency) {
  const LinkSpec plain = parse_link("200mbit", "--node-link");
  EXPECT_DOUBLE_EQ(plain.rate_Bps, 25e6);
  EXPECT_EQ(plain.latency_s, 0);
  EXPECT_EQ(plain.text, "200mbit");
  const LinkSpec slow = parse_link("1gbit,5ms", "--dc-link");
  EXPECT_DOUBLE_EQ(slow.rate_Bps, 125e6);
  EXPECT_DOUBLE_EQ(slow.latency_s, 0.005);
  EXPECT_ERROR_HAS(parse_link("1gbit,", "--dc-link"), "--dc-link", "latency ''");
  EXPECT_ERROR_HAS(parse_link(",5ms", "--dc-link"), "--dc-link", "rate ''");
  EXPECT_ERROR_HAS(parse_link("1gbit,5ms,3", "--dc-link"), "--dc-link", "'5ms,3'");
}

TEST(TestbedLinkSpec, FormatsForPeopleAndForTc) {
  EXPECT_EQ(format_rate(25e6), "200 Mbit/s");
  EXPECT_EQ(format_rate(1.5e9), "12 Gbit/s");
  EXPECT_EQ(format_rate(62500), "500 kbit/s");
  EXPECT_EQ(format_rate(1.25e12), "10 Tbit/s");
  EXPECT_EQ(format_latency(0.005), "5 ms");
  EXPECT_EQ(format_latency(1e-4), "100 us");
  EXPECT_EQ(format_latency(2), "2 s");
  EXPECT_EQ(tc_rate(25e6), "200000000bit");
  EXPECT_EQ(tc_rate(1.5e9), "12000000000bit");
  EXPECT_EQ(tc_time(0.0025), "2500us");
  EXPECT_EQ(format_number(25e6), "25000000");
  EXPECT_EQ(format_number(0.125), "0.125");
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(0.005), "0.005");
}

}  // namespace
}  // namespace moecomm::testbed
