// The trainer's callbacks (callback.hpp): the list one fit/validate/test calls (TrainerOptions'
// merged with the module's configure_callbacks, ModelCheckpoint last), their state in checkpoints
// (trainer.json "callbacks": {state_key: state}), and should_stop, which the ranks agree on at each
// epoch's end so that no rank leaves fit alone.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <plrt/sdk/model_checkpoint.hpp>
#include <plrt/sdk/model_summary.hpp>
#include <set>
#include <type_traits>
#include <typeinfo>

#include "trainer_impl.hpp"

namespace pl {

std::string Callback::state_key() const { return plrt::sdk::demangled(typeid(*this)); }

void Trainer::Impl::use_callbacks(LightningBase& m) {
  std::vector<std::shared_ptr<Callback>> list = o.callbacks;
  for (auto& c : m.configure_callbacks()) {
    if (!c) throw Error(PL_ERR_INVALID_ARGUMENT, "configure_callbacks returned a null callback");
    Callback& ref = *c;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const std::shared_ptr<Callback>& x) { return x && typeid(*x) == typeid(ref); }),
               list.end());
    list.push_back(c);
  }
  for (size_t i = 0; i < list.size(); ++i)
    if (!list[i]) throw Error(PL_ERR_INVALID_ARGUMENT, "TrainerOptions::callbacks[" + std::to_string(i) + "] is null");
  // Lightning's default ModelSummary, unless the callbacks have one (which enable_model_summary
  // false contradicts)
  const bool has_summary = std::any_of(list.begin(), list.end(), [](const std::shared_ptr<Callback>& c) {
    return dynamic_cast<ModelSummary*>(c.get()) != nullptr;
  });
  if (has_summary && !o.enable_model_summary)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "the trainer has enable_model_summary=false but its callbacks hold a ModelSummary; set "
                "enable_model_summary=true or remove the ModelSummary");
  if (!has_summary && o.enable_model_summary) list.push_back(std::make_shared<ModelSummary>());
  // Lightning's order: checkpointing last, so it saves what the other callbacks did this epoch.
  std::stable_partition(list.begin(), list.end(), [](const std::shared_ptr<Callback>& c) {
    return dynamic_cast<ModelCheckpoint*>(c.get()) == nullptr;
  });
  std::set<std::string> keys;
  for (const auto& c : list) {
    if (dynamic_cast<ModelCheckpoint*>(c.get()) && !o.enable_checkpointing && o.fast_dev_run == 0)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "the trainer has enable_checkpointing=false but its callbacks hold a ModelCheckpoint (" +
                      c->state_key() + "); set enable_checkpointing=true or remove the ModelCheckpoint");
    if (c->state_dict().empty()) continue;
    if (!keys.insert(c->state_key()).second)
      throw Error(PL_ERR_INVALID_ARGUMENT, "two callbacks with state have the same state_key '" + c->state_key() +
                                               "', so a checkpoint cannot tell their states apart; give them "
                                               "different settings (e.g. another monitor) or a unique state_key");
  }
  cbs = std::move(list);
}

nlohmann::json Trainer::Impl::callbacks_state() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& c : cbs) {
    HParams s = c->state_dict();
    if (!s.empty()) out[c->state_key()] = hparams_to_json(s);
  }
  return out;
}

void Trainer::Impl::load_callbacks_state() {
  if (saved_callbacks.is_null()) return;
  std::vector<std::string> unused;
  for (const auto& [key, state] : saved_callbacks.items()) {
    auto it = std::find_if(cbs.begin(), cbs.end(), [&, k = key](const auto& c) { return c->state_key() == k; });
    if (it == cbs.end()) {
      unused.push_back(key);
      continue;
    }
    (*it)->load_state_dict(hparams_from_json(state, "the checkpoint's state of callback '" + key + "'"));
  }
  if (!unused.empty() && rank == 0) {
    std::string names;
    for (const auto& k : unused) names += (names.empty() ? "" : ", ") + k;
    warn("the checkpoint holds the state of callbacks this fit does not have: " + names +
         "; give the trainer the same callbacks to continue them");
  }
  saved_callbacks = nullptr;
}

// After the epoch's last logged value and learning-rate step: the monitoring callbacks (their
// saves resume at the next epoch), then one collective: any rank's should_stop is every rank's.
void Trainer::Impl::monitoring_epoch_end(bool whole) {
  epoch_done = whole;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{epoch_done};
  for (size_t i = 0; i < cbs.size(); ++i)
    if (cbs[i]->monitors()) {
      const plrt::sdk::Profiler::Span timed(&profiler, profiler.on() ? callback_action(i, "on_train_epoch_end") : "");
      cbs[i]->on_train_epoch_end(*self, *module);
    }
  agree_should_stop();
}

void Trainer::Impl::agree_should_stop() {
  if (world <= 1) return;
  std::vector<double> v{should_stop ? 1.0 : 0.0};
  collectives().allreduce(v, PL_REDUCE_MAX);
  should_stop = v[0] > 0;
}

// ---- the public face ----

const std::vector<std::shared_ptr<Callback>>& Trainer::callbacks() const { return impl_->cbs; }
ModelCheckpoint* Trainer::checkpoint_callback() const {
  for (const auto& c : impl_->cbs)
    if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get())) return mc;
  return nullptr;
}
bool Trainer::should_stop() const { return impl_->should_stop; }
bool Trainer::sanity_checking() const { return impl_->sanity_checking; }
void Trainer::set_should_stop(bool stop) { impl_->should_stop = stop; }
Optimizer* Trainer::optimizer() const { return impl_->optimizer.get(); }
const std::vector<LRSchedulerConfig>& Trainer::lr_scheduler_configs() const { return impl_->schedulers; }

void Trainer::log_metrics(const std::map<std::string, double>& values) {
  if (impl_->rank != 0 || values.empty()) return;
  impl_->loggers.add_row(impl_->epoch, impl_->step, values);
}

std::string Trainer::broadcast(const std::string& bytes) {
  plrt::sdk::Collectives c = impl_->collectives();
  if (c.world_size() == 1) return bytes;
  return c.allgather(impl_->rank == 0 ? bytes : std::string()).at(0);
}

bool Trainer::reduce_boolean_decision(bool decision, bool all) {
  plrt::sdk::Collectives c = impl_->collectives();
  if (c.world_size() == 1) return decision;
  std::vector<double> v{decision ? 1.0 : 0.0};
  c.allreduce(v, all ? PL_REDUCE_MIN : PL_REDUCE_MAX);
  return v[0] > 0;
}

bool Trainer::fit_has_validation() const { return impl_->has_val; }
bool Trainer::validates_inside_epochs() const { return impl_->val_inside_epochs; }
bool Trainer::validation_has_run() const { return impl_->val_has_run; }

// The one rule of when a callback acting on validation results acts (trainer.hpp): at the
// epoch's end when it chose so, else the validations decide: each one's end inside epochs, or
// the epoch's end once its validation ran.
bool Trainer::acts_at_train_epoch_end(std::optional<bool> on_train_epoch_end, bool by_default) const {
  if (on_train_epoch_end.value_or(by_default)) return true;
  return !impl_->val_inside_epochs && impl_->val_ran;
}

bool Trainer::acts_at_validation_end(std::optional<bool> on_train_epoch_end) const {
  return impl_->fit_validating && impl_->val_inside_epochs && !on_train_epoch_end.value_or(false);
}

}  // namespace pl
