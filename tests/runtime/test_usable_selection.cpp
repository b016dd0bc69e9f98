// The usable-device check's pure parts, on their own: choosing from a device table (Lightning's
// find_usable_cuda_devices semantics, plus exclusive and busy devices), the thresholds and their
// environment variables, the table's JSON, the devices="usable:N" form, and CUDA_VISIBLE_DEVICES
// mapped onto NVML's devices.
#include "device_table.hpp"
#include "error.hpp"
#include "usable_devices.hpp"
#include "visible_devices.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

using namespace plrt::rt;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

namespace {

DeviceRecord free_device(int32_t i, const std::string& name = "NVIDIA H100 80GB HBM3") {
  DeviceRecord d;
  d.index = i;
  d.name = name;
  d.compute_mode = ComputeMode::kDefault;
  d.utilization_percent = 0;
  return d;
}

DeviceTable table_of(std::vector<DeviceRecord> devices) {
  DeviceTable t;
  t.devices = std::move(devices);
  for (size_t i = 0; i < t.devices.size(); ++i) t.devices[i].index = static_cast<int32_t>(i);
  return t;
}

// 4 devices: 1 busy with memory, 3 held in exclusive mode; 0 and 2 free.
DeviceTable mixed() {
  auto t = table_of({free_device(0), free_device(1), free_device(2), free_device(3, "NVIDIA A100")});
  t.devices[1].processes = {{4242, uint64_t(3435973837)}};
  t.devices[3].compute_mode = ComputeMode::kExclusiveProcess;
  t.devices[3].context_ok = false;
  t.devices[3].context_error = "cudaErrorDevicesUnavailable: busy or unavailable";
  return t;
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

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

const UsableThresholds kDefaults{};

}  // namespace

// ---- selection, as Lightning ----

TEST(UsableSelection, ZeroAsksForNothing) {
  EXPECT_THAT(select_usable(mixed(), 0, kDefaults, "t"), IsEmpty());
  EXPECT_THAT(select_usable(DeviceTable{}, 0, kDefaults, "t"), IsEmpty());  // not even a visible device needed
}

TEST(UsableSelection, MinusOneTakesEveryUsableDevice) {
  EXPECT_THAT(select_usable(mixed(), -1, kDefaults, "t"), ElementsAre(0, 2));
  auto all_taken = table_of({free_device(0)});
  all_taken.devices[0].context_ok = false;
  all_taken.devices[0].context_error = "x";
  EXPECT_THAT(select_usable(all_taken, -1, kDefaults, "t"), IsEmpty());  // Lightning returns []
}

TEST(UsableSelection, TheFirstNUsableInOrder) {
  EXPECT_THAT(select_usable(mixed(), 1, kDefaults, "t"), ElementsAre(0));
  EXPECT_THAT(select_usable(mixed(), 2, kDefaults, "t"), ElementsAre(0, 2));
  std::vector<std::string> skipped;
  select_usable(mixed(), 2, kDefaults, "t", &skipped);
  ASSERT_EQ(skipped.size(), 1u);  // it stops once it has 2: device 3 is not looked at
  EXPECT_THAT(skipped[0], HasSubstr("1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes"));
}

TEST(UsableSelection, MoreThanVisibleIsAnError) {
  auto msg = error_of([] { select_usable(mixed(), 5, kDefaults, "find_usable_devices(5)"); });
  EXPECT_THAT(msg, HasSubstr("find_usable_devices(5): you requested 5 devices but this machine has only 4 visible "
                             "CUDA devices; valid: 1..4"));
  msg = error_of([] { select_usable(DeviceTable{{}, "cudaErrorNoDevice: no CUDA-capable device", {}}, 1, kDefaults, "w"); });
  EXPECT_THAT(msg, HasSubstr("w: no CUDA device is visible (cudaErrorNoDevice: no CUDA-capable device)"));
  EXPECT_THAT(error_of([] { select_usable(DeviceTable{}, -1, kDefaults, "w"); }), HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(error_of([] { select_usable(mixed(), -2, kDefaults, "w"); }),
              HasSubstr("w: -2 is not a number of devices; valid: n >= 1, 0 (none) or -1"));
}

TEST(UsableSelection, TooFewUsableNamesEachOccupiedDeviceAndWhy) {
  auto msg = error_of([] { select_usable(mixed(), 3, kDefaults, "devices='usable:3'"); });
  EXPECT_THAT(msg, HasSubstr("devices='usable:3': you requested 3 usable devices but only 2 of the 4 visible CUDA "
                             "devices are usable ([0, 2])"));
  EXPECT_THAT(msg, HasSubstr("1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes (pid 4242: 3.2 GiB))"));
  EXPECT_THAT(msg, HasSubstr("3 'NVIDIA A100' (exclusive mode, held by another process)"));
  EXPECT_THAT(msg, HasSubstr("PL_USABLE_MAX_FOREIGN_MEMORY_MB"));
  EXPECT_THAT(msg, Not(HasSubstr("0 'NVIDIA")));
}

TEST(UsableSelection, EachReason) {
  auto d = free_device(0);
  EXPECT_EQ(why_unusable(d, kDefaults), std::nullopt);

  auto prohibited = d;
  prohibited.compute_mode = ComputeMode::kProhibited;
  EXPECT_THAT(why_unusable(prohibited, kDefaults).value_or(""), HasSubstr("compute mode prohibited"));

  auto held = d;  // exclusive with another process on it, even before a context is tried
  held.compute_mode = ComputeMode::kExclusiveThread;
  held.processes = {{77, std::nullopt}};
  EXPECT_EQ(why_unusable(held, kDefaults).value_or(""), "exclusive mode, held by another process (pid 77)");
  auto exclusive_free = d;  // exclusive but nobody on it: usable
  exclusive_free.compute_mode = ComputeMode::kExclusiveProcess;
  EXPECT_EQ(why_unusable(exclusive_free, kDefaults), std::nullopt);

  auto no_context = d;
  no_context.context_ok = false;
  no_context.context_error = "cudaErrorECCUncorrectable: uncorrectable ECC error";
  EXPECT_EQ(why_unusable(no_context, kDefaults).value_or(""),
            "cannot create a context: cudaErrorECCUncorrectable: uncorrectable ECC error");

  auto busy = d;
  busy.utilization_percent = 87;
  EXPECT_EQ(why_unusable(busy, kDefaults).value_or(""), "busy: 87% utilization");
  busy.utilization_percent = 10;  // the threshold itself is still usable
  EXPECT_EQ(why_unusable(busy, kDefaults), std::nullopt);
  busy.utilization_percent = std::nullopt;  // unknown (no NVML): not held against it
  EXPECT_EQ(why_unusable(busy, kDefaults), std::nullopt);

  auto memory = d;  // the sum over processes counts; unknown amounts count as 0
  memory.processes = {{1, uint64_t(600) << 20}, {2, uint64_t(600) << 20}, {3, std::nullopt}};
  EXPECT_THAT(why_unusable(memory, kDefaults).value_or(""), HasSubstr("busy: 1.2 GiB used by other processes (pid 1"));
  memory.processes.pop_back();
  memory.processes.pop_back();
  EXPECT_EQ(why_unusable(memory, kDefaults), std::nullopt);  // 600 MiB < 1 GiB
  UsableThresholds strict;
  strict.max_foreign_memory_bytes = uint64_t(512) << 20;
  EXPECT_EQ(why_unusable(memory, strict).value_or(""), "busy: 600 MiB used by other processes (pid 1: 600 MiB)");
}

// ---- thresholds: options, then the environment, then the defaults ----

TEST(UsableThresholds, DefaultsEnvAndOptions) {
  auto t = usable_thresholds(nullptr, env_of({}));
  EXPECT_EQ(t.max_utilization_percent, 10.0);
  EXPECT_EQ(t.max_foreign_memory_bytes, uint64_t(1) << 30);

  t = usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}, {"PL_USABLE_MAX_FOREIGN_MEMORY_MB", " 0 "}}));
  EXPECT_EQ(t.max_utilization_percent, 50.0);
  EXPECT_EQ(t.max_foreign_memory_bytes, 0u);
  t = usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", ""}}));  // empty = unset
  EXPECT_EQ(t.max_utilization_percent, 10.0);

  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  o.has_max_utilization = 1;
  o.max_utilization_percent = 99.5;
  t = usable_thresholds(&o, env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}, {"PL_USABLE_MAX_FOREIGN_MEMORY_MB", "2048"}}));
  EXPECT_EQ(t.max_utilization_percent, 99.5);                // the option wins
  EXPECT_EQ(t.max_foreign_memory_bytes, uint64_t(2) << 30);  // not set in the options: the environment

  // The environment's value decides: a device at 30% is busy with 10, usable with 50.
  auto d = free_device(0);
  d.utilization_percent = 30;
  EXPECT_TRUE(why_unusable(d, usable_thresholds(nullptr, env_of({}))));
  EXPECT_FALSE(why_unusable(d, usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}}))));
}

TEST(UsableThresholds, BadValuesAreNamed) {
  for (const char* bad : {"abc", "10%", "1e999", "nan"}) {
    auto msg = error_of([&] { usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", bad}})); });
    EXPECT_THAT(msg, AllOf(HasSubstr("PL_USABLE_MAX_UTILIZATION='"), HasSubstr("a percentage from 0 to 100"))) << bad;
  }
  EXPECT_THAT(error_of([] { usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "150"}})); }),
              HasSubstr("PL_USABLE_MAX_UTILIZATION='150' is 150; valid: a percentage from 0 to 100"));
  for (const char* bad : {"-1", "1.5", "lots", "99999999999999999999"}) {
    auto msg = error_of([&] { usable_thresholds(nullptr, env_of({{"PL_USABLE_MAX_FOREIGN_MEMORY_MB", bad}})); });
    EXPECT_THAT(msg, AllOf(HasSubstr(std::string("PL_USABLE_MAX_FOREIGN_MEMORY_MB='") + bad + "'"), HasSubstr("MiB")))
        << bad;
  }
  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  o.has_max_utilization = 1;
  o.max_utilization_percent = -5;
  EXPECT_THAT(error_of([&] { usable_thresholds(&o, env_of({})); }), HasSubstr("max_utilization_percent is -5"));
  o = {};
  o.struct_size = sizeof o;
  o.has_max_foreign_memory = 1;
  o.max_foreign_memory_mb = -1;
  EXPECT_THAT(error_of([&] { usable_thresholds(&o, env_of({})); }), HasSubstr("max_foreign_memory_mb is -1"));
  o.struct_size = 8;
  EXPECT_THAT(error_of([&] { usable_thresholds(&o, env_of({})); }, PL_ERR_VERSION), HasSubstr("struct_size 8"));
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

// ---- the table's JSON ----

TEST(DeviceTableJson, RoundTrip) {
  auto t = mixed();
  t.devices[0].uuid = "GPU-1234";
  t.devices[2].utilization_percent = std::nullopt;
  t.notes = {"a note"};
  auto back = table_from_json(table_to_json(t), "x");
  ASSERT_EQ(back.devices.size(), 4u);
  EXPECT_EQ(back.devices[0].uuid, "GPU-1234");
  EXPECT_EQ(back.devices[1].processes[0].pid, 4242);
  EXPECT_EQ(back.devices[1].processes[0].used_bytes, uint64_t(3435973837));
  EXPECT_EQ(back.devices[2].utilization_percent, std::nullopt);
  EXPECT_EQ(back.devices[3].compute_mode, ComputeMode::kExclusiveProcess);
  EXPECT_FALSE(back.devices[3].context_ok);
  EXPECT_EQ(back.devices[3].context_error, t.devices[3].context_error);
  EXPECT_THAT(back.notes, ElementsAre("a note"));
  // Everything but "devices" may be left out.
  auto minimal = table_from_json(R"({"devices": [{}, {"name": "B"}]})", "x");
  EXPECT_EQ(minimal.devices[1].index, 1);
  EXPECT_EQ(minimal.devices[1].compute_mode, ComputeMode::kUnknown);
  EXPECT_TRUE(minimal.devices[1].context_ok);
  EXPECT_THAT(table_from_json(R"({"devices": [], "reason": "no driver"})", "x").reason, "no driver");
}

TEST(DeviceTableJson, MalformedTablesNameTheFieldAndTheOrigin) {
  const std::string o = "PL_CUDA_DEVICE_TABLE=/t.json";
  auto bad = [&](const std::string& text) { return error_of([&] { table_from_json(text, o); }); };
  EXPECT_THAT(bad("{"), HasSubstr(o + ": not valid JSON"));
  EXPECT_THAT(bad("[]"), HasSubstr(o + ": the table is [], not an object"));
  EXPECT_THAT(bad("{}"), HasSubstr("has no \"devices\" list"));
  EXPECT_THAT(bad(R"({"devices": {}})"), HasSubstr("devices is {}, not a list"));
  EXPECT_THAT(bad(R"({"devices": [], "device": []})"), HasSubstr("unknown key 'device'; valid keys: devices, notes, reason"));
  EXPECT_THAT(bad(R"({"devices": [{"utilisation_percent": 3}]})"),
              HasSubstr("devices[0] has an unknown key 'utilisation_percent'"));
  EXPECT_THAT(bad(R"({"devices": [{}, {"index": 3}]})"), HasSubstr("devices[1].index is 3; the table lists"));
  EXPECT_THAT(bad(R"({"devices": [{"compute_mode": "shared"}]})"),
              HasSubstr("devices[0].compute_mode is \"shared\"; valid: default, exclusive_process"));
  EXPECT_THAT(bad(R"({"devices": [{"utilization_percent": 101}]})"),
              HasSubstr("devices[0].utilization_percent is 101; valid: a percentage"));
  EXPECT_THAT(bad(R"({"devices": [{"utilization_percent": "high"}]})"), HasSubstr("not a number"));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"used_bytes": 1}]}]})"), HasSubstr("devices[0].processes[0] has no \"pid\""));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"pid": 1, "used_bytes": -1}]}]})"),
              HasSubstr("devices[0].processes[0].used_bytes is -1"));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"pid": -4}]}]})"), HasSubstr("processes[0].pid is -4"));
  EXPECT_THAT(bad(R"({"devices": [{"context_ok": "no"}]})"), HasSubstr("devices[0].context_ok is \"no\", not true or false"));
  EXPECT_THAT(bad(R"({"devices": [{"name": 3}]})"), HasSubstr("devices[0].name is 3, not a string"));
  EXPECT_THAT(bad(R"({"devices": [], "notes": [1]})"), HasSubstr("notes[0] is not a string"));
  EXPECT_THAT(error_of([] { read_table_file("/nonexistent/plrt-table.json"); }),
              HasSubstr("PL_CUDA_DEVICE_TABLE=/nonexistent/plrt-table.json: cannot read the file"));
}

// ---- CUDA_VISIBLE_DEVICES onto NVML ----

TEST(VisibleDevices, CudaVisibleDevicesForms) {
  const std::vector<std::string> uuids = {"GPU-aaaa1111", "GPU-bbbb2222", "GPU-bbbb3333", "GPU-cccc4444"};
  std::vector<std::string> notes;
  using O = std::optional<size_t>;
  EXPECT_THAT(map_visible_to_nvml(nullptr, uuids, 4, &notes), ElementsAre(O(0), O(1), O(2), O(3)));
  EXPECT_THAT(notes, IsEmpty());
  EXPECT_THAT(map_visible_to_nvml("2,0", uuids, 2, &notes), ElementsAre(O(2), O(0)));
  EXPECT_THAT(map_visible_to_nvml(" 3 , GPU-AAAA", uuids, 2, &notes), ElementsAre(O(3), O(0)));  // uuid prefix
  EXPECT_THAT(notes, IsEmpty());
  // The first invalid entry ends the list, as CUDA reads it: out of range, ambiguous, repeated, junk.
  EXPECT_THAT(map_visible_to_nvml("1,7,2", uuids, 1, &notes), ElementsAre(O(1)));
  EXPECT_THAT(map_visible_to_nvml("0,GPU-bbbb,2", uuids, 1, &notes), ElementsAre(O(0)));
  EXPECT_THAT(map_visible_to_nvml("0,0,1", uuids, 1, &notes), ElementsAre(O(0)));
  EXPECT_THAT(map_visible_to_nvml("1,-1,2", uuids, 1, &notes), ElementsAre(O(1)));
  EXPECT_THAT(map_visible_to_nvml("", uuids, 0, &notes), IsEmpty());
  EXPECT_THAT(notes, IsEmpty());
  // MIG instances are not mapped, and say so.
  EXPECT_THAT(map_visible_to_nvml("MIG-GPU-aaaa1111/1/0", uuids, 1, &notes), ElementsAre(O()));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("MIG instance"));
  // CUDA and NVML disagree on the count: only the positions both know are mapped, with a note.
  notes.clear();
  EXPECT_THAT(map_visible_to_nvml(nullptr, uuids, 5, &notes), ElementsAre(O(0), O(1), O(2), O(3), O()));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("CUDA sees 5 device(s)"));
}
