// plrt::rt::parse_devices, device_arg_from_text and describe: Lightning's `devices` forms.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "device_parser.hpp"
#include "error.hpp"

namespace {

using plrt::rt::describe;
using plrt::rt::device_arg_from_text;
using plrt::rt::DeviceArg;
using plrt::rt::parse_devices;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

DeviceArg I(int64_t v) { return DeviceArg::of_int(v); }
DeviceArg L(std::vector<int64_t> v) { return DeviceArg::of_list(std::move(v)); }
DeviceArg S(std::string s) { return DeviceArg::of_string(std::move(s)); }
DeviceArg F(double v) { return DeviceArg::of_float(v); }
DeviceArg B(bool v) { return DeviceArg::of_bool(v); }
DeviceArg A() { return DeviceArg::automatic(); }
DeviceArg Kind(int32_t kind) {
  DeviceArg a;
  a.kind = kind;
  return a;
}

Ids range(int32_t n) {
  Ids out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

std::vector<int64_t> long_list(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

// Runs parse_devices and returns the error it throws; fails the test when it does not throw.
plrt::rt::Error error_of(const PL_DeviceSpec& spec, const std::string& accel, int32_t available, bool processes) {
  try {
    const Ids ids = parse_devices(spec, accel, available, processes);
    ADD_FAILURE() << "devices=" << describe(spec) << " parsed to " << ::testing::PrintToString(ids)
                  << " instead of failing";
  } catch (const plrt::rt::Error& e) {
    return e;
  }
  return plrt::rt::Error(PL_ERR_OK, "");
}

constexpr const char* kGpuHint =
    "valid: an int k (the first k devices), -1 or \"-1\" (all), a list of indices, a string like "
    "\"1, 3\", or \"auto\"";
constexpr const char* kCpuHint = "valid for the cpu accelerator: a number of processes k > 0";

// ---- the seed docs' table, exactly (available = 4 and 8) ----------------------------------------

struct Good {
  const char* name;
  DeviceArg arg;
  int32_t available;
  bool processes;
  Ids expected;
};

void PrintTo(const Good& g, std::ostream* os) { *os << g.name << ": devices=" << describe(g.arg.spec()); }

class ParseOk : public ::testing::TestWithParam<Good> {};

TEST_P(ParseOk, Parses) {
  const Good& g = GetParam();
  const std::string accel = g.processes ? "cpu" : "cuda";
  EXPECT_EQ(parse_devices(g.arg.spec(), accel, g.available, g.processes), g.expected)
      << "devices=" << describe(g.arg.spec());
}

INSTANTIATE_TEST_SUITE_P(LightningTable, ParseOk,
                         ::testing::Values(Good{"int_3", I(3), 4, false, {0, 1, 2}},
                                           Good{"int_minus1_all_of_4", I(-1), 4, false, {0, 1, 2, 3}},
                                           Good{"int_minus1_all_of_8", I(-1), 8, false, range(8)},
                                           Good{"list_0", L({0}), 4, false, {0}},
                                           Good{"list_1_3", L({1, 3}), 4, false, {1, 3}},
                                           Good{"str_3", S("3"), 4, false, {0, 1, 2}},
                                           Good{"str_1_comma_3", S("1, 3"), 4, false, {1, 3}},
                                           Good{"str_minus1_all_of_4", S("-1"), 4, false, {0, 1, 2, 3}},
                                           Good{"str_minus1_all_of_8", S("-1"), 8, false, range(8)}),
                         [](const auto& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(
    Extended, ParseOk,
    ::testing::Values(Good{"str_trailing_comma", S("2,"), 4, false, {2}},
                      Good{"str_empty_piece_dropped", S("1,,3"), 4, false, {1, 3}},
                      Good{"str_no_spaces", S("0,1,2,3"), 4, false, {0, 1, 2, 3}},
                      Good{"str_padded_count", S(" 3 "), 4, false, {0, 1, 2}},
                      Good{"str_padded_minus1", S(" -1 "), 2, false, {0, 1}},
                      Good{"str_auto", S("auto"), 4, false, {0, 1, 2, 3}},
                      Good{"kind_auto", A(), 4, false, {0, 1, 2, 3}}, Good{"kind_auto_one_device", A(), 1, false, {0}},
                      Good{"int_equal_to_available", I(4), 4, false, {0, 1, 2, 3}},
                      Good{"int_1_of_1", I(1), 1, false, {0}}, Good{"list_order_kept", L({3, 1}), 4, false, {3, 1}},
                      Good{"list_last_index", L({1}), 2, false, {1}}, Good{"cpu_int_4", I(4), 1, true, {0, 1, 2, 3}},
                      Good{"cpu_int_1", I(1), 8, true, {0}}, Good{"cpu_str_4", S("4"), 1, true, {0, 1, 2, 3}},
                      Good{"cpu_str_padded", S(" 2 "), 1, true, {0, 1}}, Good{"cpu_str_auto", S("auto"), 8, true, {0}},
                      Good{"cpu_kind_auto", A(), 8, true, {0}}, Good{"cpu_no_upper_bound", I(64), 0, true, range(64)},
                      Good{"cpu_max", I(65536), 1, true, range(65536)}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- every error: code, the bad value as written, and a hint of what is valid ----------------

struct Bad {
  const char* name;
  DeviceArg arg;
  const char* accel;
  int32_t available;
  bool processes;
  std::vector<std::string> needles;  // each must occur in the message
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name << ": devices=" << describe(b.arg.spec()); }

class ParseError : public ::testing::TestWithParam<Bad> {};

TEST_P(ParseError, Fails) {
  const Bad& b = GetParam();
  const plrt::rt::Error e = error_of(b.arg.spec(), b.accel, b.available, b.processes);
  EXPECT_EQ(e.code, PL_ERR_INVALID_ARGUMENT);
  for (const std::string& needle : b.needles) EXPECT_THAT(e.message, HasSubstr(needle));
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ParseError,
    ::testing::Values(
        Bad{"dup_list",
            L({0, 0}),
            "cuda",
            2,
            false,
            {"devices=[0, 0]: device index 0 appears twice; each index may be used once"}},
        Bad{"dup_thrice", L({1, 1, 1}), "cuda", 4, false, {"devices=[1, 1, 1]", "appears 3 times", "used once"}},
        Bad{"dup_str", S("1, 1"), "cuda", 4, false, {"devices='1, 1'", "index 1 appears twice", "used once"}},
        Bad{"neg_int", I(-2), "cuda", 4, false, {"devices=-2", "negative", "only -1 (all devices)", kGpuHint}},
        Bad{"neg_str", S("-2"), "cuda", 4, false, {"devices='-2'", "negative", kGpuHint}},
        Bad{"minus1_in_list", L({-1}), "cuda", 4, false, {"devices=[-1]", "must stand alone", kGpuHint}},
        Bad{"minus1_with_index", L({-1, 1}), "cuda", 4, false, {"devices=[-1, 1]", "stand alone", kGpuHint}},
        Bad{"minus1_in_str", S("-1, 2"), "cuda", 4, false, {"devices='-1, 2'", "stand alone", kGpuHint}},
        Bad{"neg_index", L({0, -3}), "cuda", 4, false, {"devices=[0, -3]", "index -3 is negative", kGpuHint}},
        Bad{"index_out_of_range",
            L({0, 3}),
            "cuda",
            2,
            false,
            {"devices=[0, 3]: you requested devices [0, 3] but the cuda accelerator has 2 devices "
             "(valid indices 0..1)"}},
        Bad{"index_4_of_2",
            L({4}),
            "cuda",
            2,
            false,
            {"devices=[4]", "the cuda accelerator has 2 devices (valid indices 0..1)"}},
        Bad{"str_index_out_of_range",
            S("0, 3"),
            "cuda",
            2,
            false,
            {"devices='0, 3'", "you requested devices [0, 3]", "valid indices 0..1"}},
        Bad{"index_of_one_device", L({1}), "cuda", 1, false, {"devices=[1]", "has 1 device (valid index 0)"}},
        Bad{"count_too_big",
            I(5),
            "cuda",
            4,
            false,
            {"devices=5: you requested 5 devices but the cuda accelerator has 4 devices", "1..4", "\"auto\""}},
        Bad{"str_count_too_big", S("5"), "cuda", 4, false, {"devices='5'", "has 4 devices", "1..4"}},
        Bad{"count_2_of_1", I(2), "mps", 1, false, {"devices=2", "mps accelerator has 1 device;", "of 1"}},
        Bad{"zero", I(0), "cuda", 4, false, {"devices=0 is not a valid input using the cuda accelerator", kGpuHint}},
        Bad{"zero_str", S("0"), "cuda", 4, false, {"devices='0' is not a valid input using the cuda", kGpuHint}},
        Bad{"empty_list", L({}), "cuda", 4, false, {"devices=[] is not a valid input", "no device", kGpuHint}},
        Bad{"empty_str", S(""), "cuda", 4, false, {"devices='' is not a valid input", kGpuHint}},
        Bad{"blank_str", S("  "), "cuda", 4, false, {"devices='  ' is not a valid input", kGpuHint}},
        Bad{"only_comma", S(","), "cuda", 4, false, {"devices=',' is not a valid input", kGpuHint}},
        Bad{"float", F(3.5), "cuda", 4, false, {std::string("devices=3.5 is a float; ") + kGpuHint}},
        Bad{"float_integral", F(2.0), "cuda", 4, false, {"devices=2.0 is a float", kGpuHint}},
        Bad{"float_str", S("1.5"), "cuda", 4, false, {"devices='1.5' is a float", kGpuHint}},
        Bad{"float_str_exp", S("1e2"), "cuda", 4, false, {"devices='1e2' is a float", kGpuHint}},
        Bad{"bool_true", B(true), "cuda", 4, false, {"devices=True is a bool", kGpuHint}},
        Bad{"bool_false", B(false), "cuda", 4, false, {"devices=False is a bool", kGpuHint}},
        Bad{"bool_str_true", S("true"), "cuda", 4, false, {"devices='true' is a bool", kGpuHint}},
        Bad{"bool_str_False", S("False"), "cuda", 4, false, {"devices='False' is a bool", kGpuHint}},
        Bad{"word", S("abc"), "cuda", 4, false, {"devices='abc'", "'abc' is not an integer", kGpuHint}},
        Bad{"word_in_list_str", S("1,a"), "cuda", 4, false, {"devices='1,a'", "'a' is not an integer", kGpuHint}},
        Bad{"bracket_str", S("[1, x]"), "cuda", 4, false, {"devices='[1, x]'", "is not an integer", kGpuHint}},
        Bad{"float_piece", S("1, 2.5"), "cuda", 4, false, {"devices='1, 2.5'", "'2.5' is not an integer"}},
        Bad{"none_available_int",
            I(1),
            "cuda",
            0,
            false,
            {"devices=1: no cuda device is available", "--accelerator cpu"}},
        Bad{"none_available_all", I(-1), "cuda", 0, false, {"devices=-1", "no cuda device is available"}},
        Bad{"none_available_str_all", S("-1"), "cuda", 0, false, {"devices='-1'", "no cuda device is available"}},
        Bad{"none_available_auto",
            A(),
            "cuda",
            0,
            false,
            {"devices='auto'", "no cuda device is available", "--accelerator cpu"}},
        Bad{"none_available_str_auto", S("auto"), "mps", 0, false, {"no mps device is available", "--accelerator cpu"}},
        Bad{"none_available_list", L({0}), "cuda", 0, false, {"devices=[0]", "no cuda device is available"}},
        Bad{"none_available_str_list", S("0, 1"), "cuda", 0, false, {"devices='0, 1'", "no cuda device"}},
        Bad{"absurd_int", I(100000), "cuda", 4, false, {"devices=100000", "too many", "at most 65536"}},
        Bad{"absurd_int64",
            I(std::numeric_limits<int64_t>::max()),
            "cuda",
            4,
            false,
            {"devices=9223372036854775807", "at most 65536"}},
        Bad{"absurd_str", S("100000"), "cuda", 4, false, {"devices='100000'", "at most 65536"}},
        Bad{"overflow_str",
            S("99999999999999999999"),
            "cuda",
            4,
            false,
            {"devices='99999999999999999999'", "too large", "65536"}},
        Bad{"overflow_str_piece", S("1, 99999999999999999999"), "cuda", 4, false, {"too large", kGpuHint}},
        Bad{"absurd_list", L(long_list(70000)), "cuda", 4, false, {"devices=[0, 1, 2", "70000", "too long", "65536"}},
        Bad{"absurd_available", I(-1), "cuda", 100000, false, {"devices=-1", "100000 devices", "65536"}},
        Bad{"negative_available", I(1), "cuda", -1, false, {"devices=1", "negative device count (-1)"}},
        Bad{"unknown_kind", Kind(7), "cuda", 4, false, {"unknown spec kind 7", "PL_DEVICES_AUTO (0)"}},
        Bad{"unknown_kind_negative", Kind(-1), "cuda", 4, false, {"unknown spec kind -1", "PL_DEVICES_BOOL (5)"}}),
    [](const auto& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(
    Cpu, ParseError,
    ::testing::Values(
        Bad{"list",
            L({1, 3}),
            "cpu",
            8,
            true,
            {"devices=[1, 3]: the cpu accelerator takes a number of processes, not a list of indices", kCpuHint}},
        Bad{"list_0", L({0}), "cpu", 8, true, {"devices=[0]", "not a list of indices"}},
        Bad{"empty_list", L({}), "cpu", 8, true, {"devices=[] is not a valid input using the cpu", kCpuHint}},
        Bad{"str_list", S("1, 3"), "cpu", 8, true, {"devices='1, 3'", "not a list of indices", kCpuHint}},
        Bad{"str_trailing_comma", S("2,"), "cpu", 8, true, {"devices='2,'", "not a list of indices"}},
        Bad{"zero", I(0), "cpu", 8, true, {"devices=0 is not a valid input using the cpu accelerator", kCpuHint}},
        Bad{"zero_str", S("0"), "cpu", 8, true, {"devices='0' is not a valid input", kCpuHint}},
        Bad{"empty_str", S(""), "cpu", 8, true, {"devices='' is not a valid input", kCpuHint}},
        Bad{"minus1", I(-1), "cpu", 8, true, {"devices=-1: cpu takes a number of processes > 0", kCpuHint}},
        Bad{"minus1_str", S("-1"), "cpu", 8, true, {"devices='-1': cpu takes a number of processes > 0"}},
        Bad{"negative", I(-3), "cpu", 8, true, {"devices=-3: cpu takes a number of processes > 0", kCpuHint}},
        Bad{"float", F(1.5), "cpu", 8, true, {"devices=1.5 is a float", kCpuHint}},
        Bad{"float_str", S("2.0"), "cpu", 8, true, {"devices='2.0' is a float", kCpuHint}},
        Bad{"bool", B(true), "cpu", 8, true, {"devices=True is a bool", kCpuHint}},
        Bad{"bool_str", S("True"), "cpu", 8, true, {"devices='True' is a bool", kCpuHint}},
        Bad{"word", S("abc"), "cpu", 8, true, {"devices='abc'", "'abc' is not an integer", kCpuHint}},
        Bad{"absurd", I(65537), "cpu", 8, true, {"devices=65537", "too many", "at most 65536"}},
        Bad{"unknown_kind", Kind(42), "cpu", 8, true, {"unknown spec kind 42"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ParseDevices, NullListPointerIsAnError) {
  PL_DeviceSpec spec = DeviceArg::of_list({}).spec();
  spec.list_len = 3;  // list stays NULL
  const plrt::rt::Error e = error_of(spec, "cuda", 4, false);
  EXPECT_EQ(e.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.message, HasSubstr("NULL list pointer"));
  EXPECT_THAT(e.message, HasSubstr("3 indices"));
}

TEST(ParseDevices, NullStringIsAnError) {
  PL_DeviceSpec spec = S("3").spec();
  spec.string = nullptr;
  const plrt::rt::Error e = error_of(spec, "cuda", 4, false);
  EXPECT_EQ(e.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.message, HasSubstr("NULL string"));
  EXPECT_THAT(e.message, HasSubstr(kGpuHint));
}

TEST(ParseDevices, ValueErrorsComeBeforeAvailability) {
  // With no device at all, a malformed value is still reported as such.
  EXPECT_THAT(error_of(F(1.5).spec(), "cuda", 0, false).message, HasSubstr("is a float"));
  EXPECT_THAT(error_of(L({0, 0}).spec(), "cuda", 0, false).message, HasSubstr("appears twice"));
  EXPECT_THAT(error_of(I(0).spec(), "cuda", 0, false).message, HasSubstr("not a valid input"));
}

// ---- device_arg_from_text ----------------------------------------------------------------------

TEST(DeviceArgFromText, Auto) {
  for (const char* t : {"auto", "  auto "}) {
    const DeviceArg a = device_arg_from_text(t);
    EXPECT_EQ(a.kind, PL_DEVICES_AUTO) << t;
    EXPECT_STREQ(a.spec().string, "auto");
  }
}

TEST(DeviceArgFromText, Ints) {
  const std::vector<std::pair<const char*, int64_t>> cases = {{"3", 3}, {"-1", -1}, {"0", 0}, {" 7 ", 7}, {"+2", 2}};
  for (const auto& [text, value] : cases) {
    const DeviceArg a = device_arg_from_text(text);
    EXPECT_EQ(a.kind, PL_DEVICES_INT) << text;
    EXPECT_EQ(a.int_value, value) << text;
  }
}

TEST(DeviceArgFromText, Lists) {
  const std::vector<std::pair<const char*, std::vector<int64_t>>> cases = {
      {"[1, 3]", {1, 3}}, {"[1,3]", {1, 3}},   {"[0]", {0}},   {"[]", {}},           {"[ ]", {}},
      {" [2] ", {2}},     {"[1, 3,]", {1, 3}}, {"[-1]", {-1}}, {"[ 4 , 5 ]", {4, 5}}};
  for (const auto& [text, ids] : cases) {
    const DeviceArg a = device_arg_from_text(text);
    EXPECT_EQ(a.kind, PL_DEVICES_LIST) << text;
    EXPECT_EQ(a.list, ids) << text;
    EXPECT_EQ(a.spec().list_len, ids.size()) << text;
  }
}

TEST(DeviceArgFromText, Strings) {
  for (const char* t : {"1, 3", "2,", "", "abc", "1,a", "-1, 2", "99999999999999999999", "inf"}) {
    const DeviceArg a = device_arg_from_text(t);
    EXPECT_EQ(a.kind, PL_DEVICES_STRING) << t;
    EXPECT_EQ(a.text, t);
    EXPECT_STREQ(a.spec().string, t);
  }
}

TEST(DeviceArgFromText, Floats) {
  const std::vector<std::pair<const char*, double>> cases = {{"1.5", 1.5},   {"1e2", 100.0}, {".5", 0.5},  {"2.0", 2.0},
                                                             {"-0.5", -0.5}, {"3.", 3.0},    {"1E-1", 0.1}};
  for (const auto& [text, value] : cases) {
    const DeviceArg a = device_arg_from_text(text);
    EXPECT_EQ(a.kind, PL_DEVICES_FLOAT) << text;
    EXPECT_DOUBLE_EQ(a.float_value, value) << text;
  }
}

TEST(DeviceArgFromText, Bools) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {"true", true}, {"True", true}, {"false", false}, {"False", false}};
  for (const auto& [text, value] : cases) {
    const DeviceArg a = device_arg_from_text(text);
    EXPECT_EQ(a.kind, PL_DEVICES_BOOL) << text;
    EXPECT_EQ(a.spec().bool_value, value ? 1 : 0) << text;
  }
}

TEST(DeviceArgFromText, MalformedListsThrow) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"[1, x]", "devices=[1, x]: 'x' is not an integer"},
      {"[1, 3", "devices=[1, 3: the list has no closing ']'"},
      {"[1,,3]", "devices=[1,,3]: the list has an empty entry"},
      {"[,]", "empty entry"},
      {"[", "no closing ']'"},
      {"[1.5]", "'1.5' is not an integer"},
      {"[99999999999999999999]", "'99999999999999999999' is too large"}};
  for (const auto& [text, needle] : cases) {
    try {
      device_arg_from_text(text);
      ADD_FAILURE() << text << " did not throw";
    } catch (const plrt::rt::Error& e) {
      EXPECT_EQ(e.code, PL_ERR_INVALID_ARGUMENT) << text;
      EXPECT_THAT(e.message, HasSubstr(needle));
      EXPECT_THAT(e.message, HasSubstr("like [1, 3]"));
    }
  }
}

TEST(DeviceArgFromText, FeedsParseDevices) {
  const std::vector<std::pair<const char*, Ids>> cases = {{"3", {0, 1, 2}},      {"-1", {0, 1, 2, 3}}, {"[0]", {0}},
                                                          {"[1, 3]", {1, 3}},    {"1, 3", {1, 3}},     {"2,", {2}},
                                                          {"auto", {0, 1, 2, 3}}};
  for (const auto& [text, ids] : cases) {
    const DeviceArg a = device_arg_from_text(text);
    EXPECT_EQ(parse_devices(a.spec(), "cuda", 4, false), ids) << text;
  }
  const DeviceArg big = device_arg_from_text("99999999999999999999");
  EXPECT_THAT(error_of(big.spec(), "cuda", 4, false).message, HasSubstr("too large"));
  EXPECT_THAT(error_of(device_arg_from_text("1.5").spec(), "cuda", 4, false).message,
              HasSubstr("devices=1.5 is a float"));
}

TEST(DeviceArg, SpecPointsIntoStorage) {
  const DeviceArg l = L({1, 3});
  const PL_DeviceSpec ls = l.spec();
  EXPECT_EQ(ls.struct_size, sizeof(PL_DeviceSpec));
  EXPECT_EQ(ls.list, l.list.data());
  EXPECT_EQ(ls.list_len, 2u);
  const DeviceArg s = S("1, 3");
  EXPECT_EQ(s.spec().string, s.text.c_str());
  EXPECT_EQ(I(3).spec().string, nullptr);
  EXPECT_EQ(L({}).spec().list, nullptr);
}

// ---- describe ------------------------------------------------------------------------------------

TEST(Describe, AsTheUserWroteIt) {
  EXPECT_EQ(describe(I(3).spec()), "3");
  EXPECT_EQ(describe(I(-1).spec()), "-1");
  EXPECT_EQ(describe(L({1, 3}).spec()), "[1, 3]");
  EXPECT_EQ(describe(L({}).spec()), "[]");
  EXPECT_EQ(describe(S("1, 3").spec()), "'1, 3'");
  EXPECT_EQ(describe(S("auto").spec()), "'auto'");
  EXPECT_EQ(describe(A().spec()), "'auto'");
  EXPECT_EQ(describe(S("it's").spec()), "\"it's\"");
  EXPECT_EQ(describe(S("a\tb").spec()), "'a\\x09b'");
  EXPECT_EQ(describe(B(true).spec()), "True");
  EXPECT_EQ(describe(B(false).spec()), "False");
  EXPECT_EQ(describe(Kind(9).spec()), "<unknown kind 9>");
  EXPECT_THAT(describe(L(long_list(20)).spec()), HasSubstr(", 15, ... (20 in all)]"));
}

TEST(Describe, FloatsLikePython) {
  const std::vector<std::pair<double, const char*>> cases = {{1.5, "1.5"},
                                                             {100.0, "100.0"},
                                                             {0.1, "0.1"},
                                                             {1e16, "1e+16"},
                                                             {1e-5, "1e-05"},
                                                             {-2.5, "-2.5"},
                                                             {0.0, "0.0"},
                                                             {3.5, "3.5"},
                                                             {123456.789, "123456.789"},
                                                             {0.0001, "0.0001"},
                                                             {1234567890123456.0, "1234567890123456.0"},
                                                             {2.5e-7, "2.5e-07"}};
  for (const auto& [value, text] : cases) EXPECT_EQ(describe(F(value).spec()), text) << text;
}

}  // namespace
