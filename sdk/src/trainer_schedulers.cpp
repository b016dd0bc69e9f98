// The Trainer's learning-rate schedules (LightningModule::configure_lr_schedulers): checked when
// made, stepped after an optimizer step ("step") or a training epoch and its validation ("epoch")
// as Lightning does (the batch of the epoch + 1, or the epoch + 1, divisible by `frequency`), a
// plateau schedule with the monitored value of the epoch, and kept in trainer.json so that a
// resumed run goes on with the same values as an uninterrupted one.
#include <plrt/sdk/error.hpp>

#include "trainer_impl.hpp"

namespace pl {

namespace {

std::string describe(const LRSchedulerConfig& c) {
  return c.scheduler ? c.scheduler->name() : c.plateau ? c.plateau->name() : std::string("(none)");
}

}  // namespace

void Trainer::Impl::use_schedulers() {
  schedulers = model->configure_lr_schedulers(*optimizer);
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const auto& c = schedulers[i];
    const std::string who = "configure_lr_schedulers: entry " + std::to_string(i) + " (" + describe(c) + ")";
    if (!c.scheduler == !c.plateau)
      throw Error(PL_ERR_INVALID_ARGUMENT, who + " must set exactly one of scheduler and plateau");
    if (c.interval != "epoch" && c.interval != "step")
      throw Error(PL_ERR_INVALID_ARGUMENT, who + ": interval '" + c.interval + "' is not valid; valid: epoch, step");
    if (c.frequency < 1)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  who + ": frequency " + std::to_string(c.frequency) + " is not valid; it must be >= 1");
    Optimizer& own = c.scheduler ? c.scheduler->optimizer() : c.plateau->optimizer();
    if (&own != optimizer.get())
      throw Error(PL_ERR_INVALID_ARGUMENT, who + " drives another optimizer than configure_optimizers' " +
                                               optimizer->name() + ": make it over the one it is given");
    if (c.plateau && c.monitor.empty())
      throw Error(PL_ERR_INVALID_ARGUMENT, who + " needs a monitor: the name of a logged value, e.g. \"val_loss\"");
  }
  if (saved_schedulers.is_null()) return;
  // A resumed run: the same schedules in the same order, each back at its saved state.
  if (!saved_schedulers.is_array() || saved_schedulers.size() != schedulers.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "the checkpoint holds " + std::to_string(saved_schedulers.size()) +
                                             " learning-rate schedules, configure_lr_schedulers made " +
                                             std::to_string(schedulers.size()) + ": resume with the same ones");
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const auto& saved = saved_schedulers[i];
    const std::string name = describe(schedulers[i]);
    if (saved.value("name", std::string()) != name)
      throw Error(PL_ERR_INVALID_ARGUMENT, "the checkpoint's learning-rate schedule " + std::to_string(i) + " is " +
                                               saved.value("name", std::string("?")) +
                                               ", configure_lr_schedulers made " + name +
                                               ": resume with the same ones");
    const auto state = saved.at("state").get<std::map<std::string, double>>();
    if (schedulers[i].scheduler)
      schedulers[i].scheduler->load_state(state);
    else
      schedulers[i].plateau->load_state(state);
  }
  saved_schedulers = nullptr;
}

void Trainer::Impl::step_schedulers(const std::string& interval, int64_t index,
                                    const std::map<std::string, double>& values) {
  for (auto& c : schedulers) {
    if (c.interval != interval || index % c.frequency != 0) continue;
    if (c.scheduler) {
      c.scheduler->step();
      continue;
    }
    const double* value = nullptr;  // the epoch's reduced value, else the latest logged one
    const auto& latest = settled();
    if (auto it = values.find(c.monitor); it != values.end())
      value = &it->second;
    else if (auto jt = latest.find(c.monitor); jt != latest.end())
      value = &jt->second;
    if (!value) {
      std::string logged;
      for (const auto& kv : latest) logged += (logged.empty() ? "" : ", ") + kv.first;
      const std::string msg = "ReduceLROnPlateau conditioned on '" + c.monitor +
                              "', which was not logged; logged: " + (logged.empty() ? "(none)" : logged);
      if (c.strict) throw Error(PL_ERR_INVALID_ARGUMENT, msg);
      warn(msg + "; the schedule was not stepped (strict = false)");
      continue;
    }
    c.plateau->step(*value);
  }
}

nlohmann::json Trainer::Impl::schedulers_state() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : schedulers)
    out.push_back({{"name", describe(c)},
                   {"interval", c.interval},
                   {"state", c.scheduler ? c.scheduler->state() : c.plateau->state()}});
  return out;
}

}  // namespace pl
