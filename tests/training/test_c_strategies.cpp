// The C strategies' ABI 1.4 entries called directly through their tables (single_device, the
// reference for plugin authors, and independent_c's bad options), and the contract breaches of a
// strategy's optimizer_step that the trainer must report (an entry past setup's array, fn->step
// not called, called twice).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "entries_model.hpp"
#include "training_support.hpp"

namespace {

using plrt_training::TempDir;
using ::testing::HasSubstr;

pl::RuntimeOptions test_plugins() {
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  return ro;
}

// The message of a returned PL_Error (freed), or "(no error)".
std::string message(const pl::Runtime& rt, PL_Error* e, PL_ErrorCode* code = nullptr) {
  if (e == nullptr) return "(no error)";
  std::string m = rt.host()->error_message(e);
  if (code) *code = rt.host()->error_code(e);
  rt.host()->error_destroy(e);
  return m;
}

struct SingleDevice {
  pl::Runtime rt{test_plugins()};
  const PL_StrategyApi* api = rt.find(PL_PLUGIN_STRATEGY, "single_device").api<PL_StrategyApi>();
  PL_Strategy* s = nullptr;
  std::vector<float> a{1, 2, 3, 4}, b{5, 6}, c{7};
  std::vector<PL_Parameter> params;
  SingleDevice() {
    PL_StrategyConfig cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.world_size = 1;
    cfg.local_world_size = 1;
    cfg.num_nodes = 1;
    pl::check(rt.host(), api->create(rt.host(), &cfg, &s));
  }
  ~SingleDevice() {
    if (s) {
      api->teardown(s);
      api->destroy(s);
    }
  }
  static PL_Tensor flat(std::vector<float>& v) {
    PL_Tensor t{};
    t.struct_size = sizeof t;
    t.data = v.data();
    t.dtype = PL_F32;
    t.device = {PL_DEVICE_CPU, 0};
    t.numel = static_cast<int64_t>(v.size());
    t.ndim = 1;
    t.shape[0] = t.numel;
    return t;
  }
  // a trainable, a frozen (or, as a 1.3 host sends it, requires_grad 0 with no kind), a buffer
  void setup(bool host13) {
    for (auto [v, kind] : {std::pair{&a, PL_PARAM_TRAINABLE}, {&b, PL_PARAM_FROZEN}, {&c, PL_PARAM_BUFFER}}) {
      PL_Parameter p{};
      p.struct_size = host13 ? PL_STRUCT_SIZE(PL_Parameter, requires_grad) : sizeof p;
      p.name = "x";
      p.value = flat(*v);
      p.grad = flat(*v);
      p.requires_grad = kind == PL_PARAM_TRAINABLE;
      if (!host13) p.kind = kind;
      params.push_back(p);
    }
    pl::check(rt.host(), api->setup(s, params.data(), params.size()));
  }
};

std::vector<std::vector<int64_t>> ranges_of(SingleDevice& sd) {
  std::vector<std::vector<int64_t>> seen;
  std::function<void(const PL_ParamRange*, size_t)> record = [&](const PL_ParamRange* r, size_t n) {
    for (size_t i = 0; i < n; ++i) seen.push_back({static_cast<int64_t>(r[i].param_index), r[i].begin, r[i].end});
  };
  PL_OptimizerFn fn{sizeof(PL_OptimizerFn), &record, [](void* user, const PL_ParamRange* r, size_t n) -> PL_Error* {
                      (*static_cast<std::function<void(const PL_ParamRange*, size_t)>*>(user))(r, n);
                      return nullptr;
                    }};
  EXPECT_EQ(message(sd.rt, sd.api->optimizer_step(sd.s, &fn)), "(no error)");
  return seen;
}

TEST(SingleDeviceEntries, OptimizerStepNamesEveryTrainableParameterWhole) {
  for (bool host13 : {false, true}) {
    SingleDevice sd;
    sd.setup(host13);
    EXPECT_EQ(ranges_of(sd), (std::vector<std::vector<int64_t>>{{0, 0, 4}})) << (host13 ? "1.3 host" : "1.4 host");
  }
}

TEST(SingleDeviceEntries, AloneAgreeSkipReduceAndAllGatherAreItsOwn) {
  SingleDevice sd;
  sd.setup(false);
  int32_t skip = -1;
  EXPECT_EQ(message(sd.rt, sd.api->agree_skip(sd.s, 0, &skip)), "(no error)");
  EXPECT_EQ(skip, 0);
  EXPECT_EQ(message(sd.rt, sd.api->agree_skip(sd.s, 1, &skip)), "(no error)");
  EXPECT_EQ(skip, 1);
  PL_Tensor t = SingleDevice::flat(sd.a);
  EXPECT_EQ(message(sd.rt, sd.api->reduce(sd.s, &t, PL_REDUCE_SUM)), "(no error)");
  EXPECT_EQ(sd.a, (std::vector<float>{1, 2, 3, 4}));
  std::vector<float> out(4, 0);
  PL_Tensor o = SingleDevice::flat(out);
  EXPECT_EQ(message(sd.rt, sd.api->all_gather(sd.s, &t, &o, 1)), "(no error)");
  EXPECT_EQ(out, sd.a);
  PL_StrategyStateInfo info{};
  info.struct_size = sizeof info;
  info.has_state = 7;
  EXPECT_EQ(message(sd.rt, sd.api->state_info(sd.s, &info)), "(no error)");
  EXPECT_EQ(info.has_state, 0);
  EXPECT_EQ(sd.api->save_state, nullptr);
  EXPECT_EQ(sd.api->load_state, nullptr);
}

TEST(SingleDeviceEntries, BadArgumentsAreNamed) {
  SingleDevice sd;
  sd.setup(false);
  PL_ErrorCode code{};
  PL_Tensor t = SingleDevice::flat(sd.a);
  EXPECT_THAT(message(sd.rt, sd.api->reduce(sd.s, &t, 9), &code), HasSubstr("reduce op 9 is not valid (1 sum"));
  EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT);
  PL_Tensor outs[2] = {SingleDevice::flat(sd.a), SingleDevice::flat(sd.a)};
  EXPECT_THAT(message(sd.rt, sd.api->all_gather(sd.s, &t, outs, 2), &code),
              HasSubstr("2 outputs but the world size is 1"));
  EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT);
  PL_Tensor small = SingleDevice::flat(sd.b);
  EXPECT_THAT(message(sd.rt, sd.api->all_gather(sd.s, &t, &small, 1)), HasSubstr("output holds 2 elements"));
  EXPECT_THAT(message(sd.rt, sd.api->agree_skip(sd.s, 1, nullptr)), HasSubstr("out_skip"));
  EXPECT_THAT(message(sd.rt, sd.api->optimizer_step(sd.s, nullptr)), HasSubstr("step function"));
  PL_StrategyStateInfo old{};
  old.struct_size = sizeof(size_t);
  EXPECT_THAT(message(sd.rt, sd.api->state_info(sd.s, &old)), HasSubstr("ABI 1.4 PL_StrategyStateInfo"));
}

TEST(IndependentCEntries, BadOptionsAreNamedWithTheValidOnes) {
  pl::Runtime rt(test_plugins());
  auto* api = rt.find(PL_PLUGIN_STRATEGY, "independent_c").api<PL_StrategyApi>();
  for (auto [key, value, says] : {std::tuple{"step", "sideways", "step='sideways' is not valid (whole, first_half"},
                                  std::tuple{"skip", "never", "skip='never' is not valid (agree, always)"}}) {
    PL_Option opt{sizeof(PL_Option), key, value};
    PL_StrategyConfig cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.options = {sizeof(PL_OptionList), &opt, 1};
    PL_Strategy* s = nullptr;
    PL_ErrorCode code{};
    EXPECT_THAT(message(rt, api->create(rt.host(), &cfg, &s), &code), HasSubstr(says));
    EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT);
  }
}

// ---- the trainer reports a strategy that breaks optimizer_step's contract ----

std::string fit_error(const std::string& step_mode) {
  TempDir dir;
  pl::TrainerOptions o;
  o.strategy = "independent_c";
  o.accelerator = "cpu";
  o.devices = 1;
  o.max_epochs = 1;
  o.default_root_dir = dir.path.string();
  o.enable_progress_bar = false;
  o.enable_checkpointing = false;
  o.read_env = false;
  o.strategy_options = {{"step", step_mode}};
  pl::Trainer trainer(o, test_plugins());
  entries_test::Model model;
  auto data = entries_test::loader(12, 6);
  try {
    trainer.fit(model, data);
  } catch (const pl::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StrategyContract, OptimizerStepBreachesAreReported) {
  EXPECT_THAT(fit_error("bad_index"), HasSubstr("names entry 5 but setup registered 5 (valid: 0 to 5 - 1)"));
  EXPECT_THAT(fit_error("none"), HasSubstr("returned without calling fn->step"));
  EXPECT_THAT(fit_error("twice"), HasSubstr("called more than once"));
}

}  // namespace
