// The cuda accelerator's judgement of each device for device_status, on its own (the plugin's
// host-only sources compiled in; no GPU, no nvcc needed): each reason a device is occupied, the
// thresholds from the options, the environment and the defaults, the device table's JSON (the
// format of PL_CUDA_DEVICE_TABLE), and CUDA_VISIBLE_DEVICES mapped onto NVML's devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "device_table.hpp"
#include "plugin_support.hpp"
#include "usable_rules.hpp"
#include "visible_devices.hpp"

using namespace plrt::cuda;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

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
  } catch (const plrt::plugin::Failure& e) {
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

// device_status's options, as the runtime passes them.
struct Options {
  std::vector<PL_Option> items;
  PL_OptionList list{sizeof(PL_OptionList), nullptr, 0};
  Options(std::initializer_list<std::pair<const char*, const char*>> kv) {
    for (const auto& [k, v] : kv) items.push_back(PL_Option{sizeof(PL_Option), k, v});
    list.items = items.data();
    list.count = items.size();
  }
};

const UsableThresholds kDefaults{};

}  // namespace

// ---- why a device is occupied ----

TEST(CudaUsableRules, EachReason) {
  auto d = free_device(0);
  EXPECT_EQ(why_unusable(d, kDefaults), std::nullopt);

  auto prohibited = d;
  prohibited.compute_mode = ComputeMode::kProhibited;
  EXPECT_EQ(why_unusable(prohibited, kDefaults).value_or(""), "compute mode prohibited (no process may use it)");

  auto held = d;  // exclusive with another process on it, even before a context is tried
  held.compute_mode = ComputeMode::kExclusiveThread;
  held.processes = {{77, std::nullopt}};
  EXPECT_EQ(why_unusable(held, kDefaults).value_or(""), "exclusive mode, held by another process (pid 77)");
  auto exclusive_free = d;  // exclusive but nobody on it: usable
  exclusive_free.compute_mode = ComputeMode::kExclusiveProcess;
  EXPECT_EQ(why_unusable(exclusive_free, kDefaults), std::nullopt);
  exclusive_free.context_ok = false;  // ... unless no context could be made: someone holds it
  exclusive_free.context_error = "x";
  EXPECT_EQ(why_unusable(exclusive_free, kDefaults).value_or(""), "exclusive mode, held by another process");

  auto no_context = d;
  no_context.context_ok = false;
  no_context.context_error = "cudaErrorECCUncorrectable: uncorrectable ECC error";
  EXPECT_EQ(why_unusable(no_context, kDefaults).value_or(""),
            "cannot create a context: cudaErrorECCUncorrectable: uncorrectable ECC error");

  auto busy = d;
  busy.utilization_percent = 87;
  EXPECT_EQ(why_unusable(busy, kDefaults).value_or(""),
            "busy: 87% utilization, more than 10% (PL_USABLE_MAX_UTILIZATION)");
  busy.utilization_percent = 10;  // the threshold itself is still usable
  EXPECT_EQ(why_unusable(busy, kDefaults), std::nullopt);
  busy.utilization_percent = std::nullopt;  // unknown (no NVML): not held against it
  EXPECT_EQ(why_unusable(busy, kDefaults), std::nullopt);

  auto memory = d;  // the sum over processes counts; unknown amounts count as 0
  memory.processes = {{1, uint64_t(600) << 20}, {2, uint64_t(600) << 20}, {3, std::nullopt}};
  EXPECT_THAT(why_unusable(memory, kDefaults).value_or(""),
              HasSubstr("busy: 1.2 GiB used by other processes (pid 1: 600 MiB, pid 2: 600 MiB, pid 3), more than "
                        "1024 MiB (PL_USABLE_MAX_FOREIGN_MEMORY_MB)"));
  memory.processes.pop_back();
  memory.processes.pop_back();
  EXPECT_EQ(why_unusable(memory, kDefaults), std::nullopt);  // 600 MiB < 1 GiB
  UsableThresholds strict;
  strict.max_foreign_memory_bytes = uint64_t(512) << 20;
  EXPECT_EQ(
      why_unusable(memory, strict).value_or(""),
      "busy: 600 MiB used by other processes (pid 1: 600 MiB), more than 512 MiB (PL_USABLE_MAX_FOREIGN_MEMORY_MB)");
  // Many processes: four are named, then the count.
  memory.processes.clear();
  for (int64_t pid = 1; pid <= 6; ++pid) memory.processes.push_back({pid, uint64_t(1) << 30});
  EXPECT_THAT(why_unusable(memory, kDefaults).value_or(""), HasSubstr("pid 4: 1.0 GiB, ... (6 processes))"));
}

TEST(CudaUsableRules, TheFirstReasonWins) {
  auto d = free_device(0);
  d.compute_mode = ComputeMode::kProhibited;
  d.context_ok = false;
  d.context_error = "x";
  d.utilization_percent = 99;
  EXPECT_THAT(why_unusable(d, kDefaults).value_or(""), HasSubstr("compute mode prohibited"));
  d.compute_mode = ComputeMode::kDefault;
  EXPECT_THAT(why_unusable(d, kDefaults).value_or(""), HasSubstr("cannot create a context: x"));
}

// ---- settings: options, then the environment, then the defaults ----

TEST(CudaUsableSettings, DefaultsEnvAndOptions) {
  auto s = usable_settings(nullptr, env_of({}));
  EXPECT_EQ(s.thresholds.max_utilization_percent, 10.0);
  EXPECT_EQ(s.thresholds.max_foreign_memory_bytes, uint64_t(1) << 30);
  EXPECT_EQ(s.probe_timeout, std::chrono::milliseconds(30000));

  s = usable_settings(nullptr,
                      env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}, {"PL_USABLE_MAX_FOREIGN_MEMORY_MB", " 0 "}}));
  EXPECT_EQ(s.thresholds.max_utilization_percent, 50.0);
  EXPECT_EQ(s.thresholds.max_foreign_memory_bytes, 0u);
  s = usable_settings(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", ""}}));  // empty = unset
  EXPECT_EQ(s.thresholds.max_utilization_percent, 10.0);

  Options o{{"max_utilization", "99.5"}, {"probe_timeout_ms", "700"}};
  s = usable_settings(&o.list,
                      env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}, {"PL_USABLE_MAX_FOREIGN_MEMORY_MB", "2048"}}));
  EXPECT_EQ(s.thresholds.max_utilization_percent, 99.5);                // the option wins
  EXPECT_EQ(s.thresholds.max_foreign_memory_bytes, uint64_t(2) << 30);  // not an option: the environment
  EXPECT_EQ(s.probe_timeout, std::chrono::milliseconds(700));
  Options mem{{"max_foreign_memory_mb", "0"}};
  EXPECT_EQ(usable_settings(&mem.list, env_of({{"PL_USABLE_MAX_FOREIGN_MEMORY_MB", "2048"}}))
                .thresholds.max_foreign_memory_bytes,
            0u);

  // The environment's value decides: a device at 30% is busy with 10, usable with 50.
  auto d = free_device(0);
  d.utilization_percent = 30;
  EXPECT_TRUE(why_unusable(d, usable_settings(nullptr, env_of({})).thresholds));
  EXPECT_FALSE(why_unusable(d, usable_settings(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "50"}})).thresholds));
}

TEST(CudaUsableSettings, BadValuesAreNamed) {
  for (const char* bad : {"abc", "10%", "1e999", "nan"}) {
    auto msg = error_of([&] { usable_settings(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", bad}})); });
    EXPECT_THAT(msg, AllOf(HasSubstr("PL_USABLE_MAX_UTILIZATION='"), HasSubstr("a percentage from 0 to 100"))) << bad;
  }
  EXPECT_THAT(error_of([] {
                usable_settings(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "150"}}));
              }),
              HasSubstr("PL_USABLE_MAX_UTILIZATION='150' is 150; valid: a percentage from 0 to 100"));
  EXPECT_THAT(error_of([] {
                usable_settings(nullptr, env_of({{"PL_USABLE_MAX_UTILIZATION", "lots"}}));
              }),
              HasSubstr("PL_USABLE_MAX_UTILIZATION='lots' is not a number"));
  for (const char* bad : {"-1", "1.5", "lots", "99999999999999999999"}) {
    auto msg = error_of([&] { usable_settings(nullptr, env_of({{"PL_USABLE_MAX_FOREIGN_MEMORY_MB", bad}})); });
    EXPECT_THAT(msg, AllOf(HasSubstr(std::string("PL_USABLE_MAX_FOREIGN_MEMORY_MB='") + bad + "'"), HasSubstr("MiB")))
        << bad;
  }
  // Options: a bad value names the option; an unknown one lists the valid names.
  Options util{{"max_utilization", "-5"}};
  EXPECT_THAT(error_of([&] { usable_settings(&util.list, env_of({})); }),
              HasSubstr("cuda: device_status option max_utilization='-5' is -5; valid: a percentage from 0 to 100"));
  Options mem{{"max_foreign_memory_mb", "-1"}};
  EXPECT_THAT(error_of([&] { usable_settings(&mem.list, env_of({})); }),
              HasSubstr("option max_foreign_memory_mb='-1' is -1; valid: a whole number of MiB"));
  Options timeout{{"probe_timeout_ms", "0"}};
  EXPECT_THAT(error_of([&] { usable_settings(&timeout.list, env_of({})); }),
              HasSubstr("option probe_timeout_ms='0' is 0; valid: a whole number of milliseconds from 1"));
  Options typo{{"max_utilisation", "5"}};
  EXPECT_THAT(error_of([&] { usable_settings(&typo.list, env_of({})); }),
              HasSubstr("cuda: device_status: unknown option 'max_utilisation'; valid: max_utilization (percent), "
                        "max_foreign_memory_mb (MiB), probe_timeout_ms"));
  // A bad option is reported even where the environment is fine, and the other way round.
  EXPECT_THAT(error_of([&] {
                usable_settings(&util.list, env_of({{"PL_USABLE_MAX_UTILIZATION", "5"}}));
              }),
              HasSubstr("max_utilization='-5'"));
  PL_OptionList broken{sizeof(PL_OptionList), nullptr, 2};
  EXPECT_THAT(error_of([&] { usable_settings(&broken, env_of({})); }),
              HasSubstr("options has 2 items but items is NULL"));
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
  EXPECT_THAT(bad(R"({"devices": [], "device": []})"),
              HasSubstr("unknown key 'device'; valid keys: devices, notes, reason"));
  EXPECT_THAT(bad(R"({"devices": [{"utilisation_percent": 3}]})"),
              HasSubstr("devices[0] has an unknown key 'utilisation_percent'"));
  EXPECT_THAT(bad(R"({"devices": [{}, {"index": 3}]})"), HasSubstr("devices[1].index is 3; the table lists"));
  EXPECT_THAT(bad(R"({"devices": [{"compute_mode": "shared"}]})"),
              HasSubstr("devices[0].compute_mode is \"shared\"; valid: default, exclusive_process"));
  EXPECT_THAT(bad(R"({"devices": [{"utilization_percent": 101}]})"),
              HasSubstr("devices[0].utilization_percent is 101; valid: a percentage"));
  EXPECT_THAT(bad(R"({"devices": [{"utilization_percent": "high"}]})"), HasSubstr("not a number"));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"used_bytes": 1}]}]})"),
              HasSubstr("devices[0].processes[0] has no \"pid\""));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"pid": 1, "used_bytes": -1}]}]})"),
              HasSubstr("devices[0].processes[0].used_bytes is -1"));
  EXPECT_THAT(bad(R"({"devices": [{"processes": [{"pid": -4}]}]})"), HasSubstr("processes[0].pid is -4"));
  EXPECT_THAT(bad(R"({"devices": [{"context_ok": "no"}]})"),
              HasSubstr("devices[0].context_ok is \"no\", not true or false"));
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
