// The runtime's side of the usable-device check, on its own: Lightning's find_usable_cuda_devices
// rules over the statuses an accelerator reports (which devices, in which order, the errors that
// name each occupied device), the devices="usable:N" form, and PL_UsableDeviceOptions turned into
// device_status's options.  The cuda plugin's judgement of each device: test_cuda_usable_rules.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "error.hpp"
#include "usable_devices.hpp"

using namespace plrt::rt;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

namespace {

DeviceState free_device(int32_t i, const std::string& name = "NVIDIA H100 80GB HBM3") {
  return DeviceState{i, true, name, ""};
}

DeviceState occupied(int32_t i, const std::string& name, const std::string& reason) {
  return DeviceState{i, false, name, reason};
}

// 4 devices: 1 busy, 3 held in exclusive mode; 0 and 2 free.
std::vector<DeviceState> mixed() {
  return {free_device(0),
          occupied(1, "NVIDIA H100 80GB HBM3", "busy: 3.2 GiB used by other processes (pid 4242: 3.2 GiB)"),
          free_device(2), occupied(3, "NVIDIA A100", "exclusive mode, held by another process")};
}

template <class Fn>
std::string error_of(Fn&& fn, PL_ErrorCode code = PL_ERR_INVALID_ARGUMENT) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code, code) << e.message;
    return e.message;
  }
  ADD_FAILURE() << "expected an error";
  return {};
}

std::map<std::string, std::string> as_map(const StatusOptions& o) {
  std::map<std::string, std::string> m;
  EXPECT_EQ(o.list.struct_size, sizeof(PL_OptionList));
  for (size_t i = 0; i < o.list.count; ++i) m[o.list.items[i].key] = o.list.items[i].value;
  return m;
}

}  // namespace

// ---- selection, as Lightning ----

TEST(UsableSelection, ZeroAsksForNothing) {
  EXPECT_THAT(select_usable(mixed(), 0, "t", "CUDA"), IsEmpty());
  EXPECT_THAT(select_usable({}, 0, "t", "CUDA"), IsEmpty());  // not even a visible device needed
}

TEST(UsableSelection, MinusOneTakesEveryUsableDevice) {
  EXPECT_THAT(select_usable(mixed(), -1, "t", "CUDA"), ElementsAre(0, 2));
  EXPECT_THAT(select_usable({occupied(0, "", "x")}, -1, "t", "CUDA"), IsEmpty());  // Lightning returns []
}

TEST(UsableSelection, TheFirstNUsableInOrder) {
  EXPECT_THAT(select_usable(mixed(), 1, "t", "CUDA"), ElementsAre(0));
  EXPECT_THAT(select_usable(mixed(), 2, "t", "CUDA"), ElementsAre(0, 2));
  std::vector<std::string> skipped;
  select_usable(mixed(), 2, "t", "CUDA", &skipped);
  ASSERT_EQ(skipped.size(), 1u);  // it stops once it has 2: device 3 is not looked at
  EXPECT_EQ(skipped[0], "1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes (pid 4242: 3.2 GiB))");
  // The ids are the statuses' indices, not positions.
  EXPECT_THAT(select_usable({free_device(0), occupied(1, "", "x"), free_device(2)}, -1, "t", "CUDA"),
              ElementsAre(0, 2));
}

TEST(UsableSelection, MoreThanVisibleIsAnError) {
  auto msg = error_of([] { select_usable(mixed(), 5, "find_usable_devices(5)", "CUDA"); });
  EXPECT_THAT(msg, HasSubstr("find_usable_devices(5): you requested 5 devices but this machine has only 4 visible "
                             "CUDA devices; valid: 1..4"));
  EXPECT_THAT(error_of([] { select_usable({free_device(0)}, 2, "w", "CPU"); }),
              HasSubstr("w: you requested 2 devices but this machine has only 1 visible CPU device; valid: 1..1"));
  EXPECT_THAT(error_of([] { select_usable({}, 1, "w", "CUDA"); }), HasSubstr("w: no CUDA device is visible"));
  EXPECT_THAT(error_of([] { select_usable({}, -1, "w", "CUDA"); }), HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(error_of([] { select_usable(mixed(), -2, "w", "CUDA"); }),
              HasSubstr("w: -2 is not a number of devices; valid: n >= 1, 0 (none) or -1"));
}

TEST(UsableSelection, TooFewUsableNamesEachOccupiedDeviceAndWhy) {
  auto msg = error_of([] { select_usable(mixed(), 3, "devices='usable:3'", "CUDA"); });
  EXPECT_THAT(msg, HasSubstr("devices='usable:3': you requested 3 usable devices but only 2 of the 4 visible CUDA "
                             "devices are usable ([0, 2])"));
  EXPECT_THAT(msg, HasSubstr("; occupied: 1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes (pid 4242: "
                             "3.2 GiB)); 3 'NVIDIA A100' (exclusive mode, held by another process)"));
  EXPECT_THAT(msg, Not(HasSubstr("0 'NVIDIA")));
  msg = error_of([] { select_usable({occupied(0, "", "held"), free_device(1, "")}, 2, "w", "CUDA"); });
  EXPECT_THAT(msg, HasSubstr("only 1 of the 2 visible CUDA devices is usable ([1]); occupied: 0 (held)"));
  msg = error_of([] { select_usable({occupied(0, "", "held")}, 1, "w", "CUDA"); });
  EXPECT_THAT(msg, HasSubstr("only 0 of the 1 visible CUDA device are usable; occupied: 0 (held)"));
}

TEST(UsableSelection, DescribeOccupied) {
  EXPECT_EQ(describe_occupied(mixed()),
            "1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes (pid 4242: 3.2 GiB)); "
            "3 'NVIDIA A100' (exclusive mode, held by another process)");
  EXPECT_EQ(describe_occupied({free_device(0)}), "");
}

// ---- devices="usable[:N]" ----

TEST(UsableRequest, Forms) {
  auto spec = [](PL_DeviceSpecKind kind, const char* s) {
    PL_DeviceSpec d{};
    d.struct_size = sizeof d;
    d.kind = kind;
    d.string = s;
    return d;
  };
  EXPECT_EQ(usable_request(spec(PL_DEVICES_STRING, "usable")), -1);
  EXPECT_EQ(usable_request(spec(PL_DEVICES_TEXT, " usable:2 ")), 2);
  EXPECT_EQ(usable_request(spec(PL_DEVICES_TEXT, "usable:-1")), -1);
  EXPECT_EQ(usable_request(spec(PL_DEVICES_TEXT, "2")), std::nullopt);
  EXPECT_EQ(usable_request(spec(PL_DEVICES_TEXT, "usablex")), std::nullopt);  // left to the parser's error
  EXPECT_EQ(usable_request(spec(PL_DEVICES_INT, "usable")), std::nullopt);
  EXPECT_EQ(usable_request(PL_DeviceSpec{}), std::nullopt);
  EXPECT_THAT(error_of([&] { usable_request(spec(PL_DEVICES_TEXT, "usable:0")); }),
              HasSubstr("devices='usable:0' selects no device; valid: \"usable:N\""));
  EXPECT_THAT(error_of([&] { usable_request(spec(PL_DEVICES_TEXT, "usable:two")); }),
              HasSubstr("devices='usable:two': 'two' is not an integer"));
  EXPECT_THAT(error_of([&] { usable_request(spec(PL_DEVICES_TEXT, "usable:")); }), HasSubstr("'' is not an integer"));
  EXPECT_THAT(error_of([&] { usable_request(spec(PL_DEVICES_TEXT, "usable:-3")); }), HasSubstr("-3 is negative"));
  EXPECT_THAT(error_of([&] { usable_request(spec(PL_DEVICES_TEXT, "usable:99999999")); }), HasSubstr("too many"));
}

// ---- PL_UsableDeviceOptions -> device_status's options ----

TEST(UsableOptions, OnlyTheFieldsSetBecomeOptions) {
  StatusOptions o;
  status_options(nullptr, &o);
  EXPECT_EQ(o.list.count, 0u);
  EXPECT_EQ(o.list.items, nullptr);

  PL_UsableDeviceOptions u{};
  u.struct_size = sizeof u;
  status_options(&u, &o);  // all zero: the accelerator's defaults
  EXPECT_EQ(o.list.count, 0u);

  u.has_max_utilization = 1;
  u.max_utilization_percent = 99.5;
  u.has_max_foreign_memory = 1;
  u.max_foreign_memory_mb = 0;  // 0 is a value, set by has_max_foreign_memory
  u.probe_timeout_ms = 700;
  status_options(&u, &o);
  EXPECT_EQ(as_map(o), (std::map<std::string, std::string>{
                           {"max_utilization", "99.5"}, {"max_foreign_memory_mb", "0"}, {"probe_timeout_ms", "700"}}));
  u.max_utilization_percent = 0.1;  // round-trips exactly through the text
  status_options(&u, &o);
  EXPECT_EQ(std::stod(as_map(o)["max_utilization"]), 0.1);
  u.probe_timeout_ms = -5;  // <= 0: the accelerator's default
  status_options(&u, &o);
  EXPECT_EQ(as_map(o).count("probe_timeout_ms"), 0u);
}

TEST(UsableOptions, BadFieldsAreNamedBeforeAnythingIsAsked) {
  PL_UsableDeviceOptions u{};
  u.struct_size = sizeof u;
  u.has_max_utilization = 1;
  StatusOptions o;
  for (double bad : {-5.0, 100.5, std::nan("")}) {
    u.max_utilization_percent = bad;
    EXPECT_THAT(error_of([&] { status_options(&u, &o); }),
                HasSubstr("PL_UsableDeviceOptions.max_utilization_percent is "))
        << bad;
  }
  EXPECT_THAT(error_of([&] { status_options(&u, &o); }), HasSubstr("valid: a percentage from 0 to 100"));
  u = {};
  u.struct_size = sizeof u;
  u.has_max_foreign_memory = 1;
  u.max_foreign_memory_mb = -1;
  EXPECT_THAT(error_of([&] { status_options(&u, &o); }),
              HasSubstr("max_foreign_memory_mb is -1; valid: a whole number"));
  u.struct_size = 8;
  EXPECT_THAT(error_of([&] { status_options(&u, &o); }, PL_ERR_VERSION), HasSubstr("struct_size 8"));
}
