// When fit validates: Lightning's check_val_every_n_epoch and val_check_interval (see
// TrainerOptions), and fit's validation itself, at an epoch's end or inside it.
//
// Lightning's rule, kept here: val_check_batch is the count, or max(1, int(batches x fraction));
// an epoch validates when check_val_every_n_epoch divides its number + 1 (always when it is
// unset); batch i of it (of the fit, counted across epochs, when check_val_every_n_epoch is unset)
// is followed by validation when (i + 1) % val_check_batch == 0.  A validation inside an epoch
// runs after the batch's optimizer step and on_train_batch_end, with the training loop's logged
// values parked (MetricLog::park) so that the epoch's means and metrics are the training's alone.
#include <algorithm>
#include <cmath>

#include "trainer_impl.hpp"

namespace pl {

void Trainer::Impl::plan_validation(const DataLoader& train, const DataLoader* val) {
  val_check_batch = 0;
  val_inside_epochs = false;
  epoch_batches_limit = o.limit_train_batches.of(train.num_batches(), "limit_train_batches");
  if (!val || epoch_batches_limit == 0) return;
  const BatchLimit& every = o.val_check_interval;
  if (every.is_fraction()) {
    val_check_batch = std::max<int64_t>(
        1, static_cast<int64_t>(std::floor(static_cast<double>(epoch_batches_limit) * every.fraction())));
  } else {
    val_check_batch = every.count();
    if (val_check_batch > epoch_batches_limit && o.check_val_every_n_epoch)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "val_check_interval=" + every.text() + " is more than the " + std::to_string(epoch_batches_limit) +
                      " training batch(es) of an epoch, so validation would never run; give a count up to " +
                      std::to_string(epoch_batches_limit) +
                      " or a fraction such as 0.5, leave "
                      "check_val_every_n_epoch unset (None) to count batches across epochs, or limit_val_batches=0 to "
                      "turn validation off");
  }
  val_inside_epochs = !every.all();
}

bool Trainer::Impl::validates_in_epoch() const {
  return !o.check_val_every_n_epoch || (epoch + 1) % *o.check_val_every_n_epoch == 0;
}

bool Trainer::Impl::validates_after(int64_t batch) const {
  if (val_check_batch <= 0 || !validates_in_epoch()) return false;
  const int64_t i = o.check_val_every_n_epoch ? batch : epoch * epoch_batches_limit + batch;
  return (i + 1) % val_check_batch == 0;
}

std::map<std::string, double> Trainer::Impl::fit_validation(DataLoader& val, bool inside_epoch) {
  plrt::sdk::MetricLog::Parked training = metrics.park();
  std::map<std::string, double> values;
  {
    fit_validating = true;
    struct Done {
      bool& f;
      ~Done() { f = false; }
    } done{fit_validating};
    values = eval_loop(val, false);
  }
  metrics.unpark(std::move(training));
  val_ran = val_has_run = true;
  if (inside_epoch) {
    loggers.add_row(epoch, step > 0 ? step - 1 : 0, values);  // Lightning's: at the steps taken so far
    agree_should_stop();                                      // EarlyStopping's, a callback's on_validation_end
  }
  return values;
}

}  // namespace pl
