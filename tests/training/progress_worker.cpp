// A small training job for the progress bar's terminal tests (test_progress_tty): one weight,
// `batches` batches per epoch, each sleeping `sleep_ms` so that the run lasts long enough for the
// redraw limit to matter, and every `log_every` batches a log line through the trainer's runtime
// on EVERY rank (rank 1's lines reach plrun's terminal while rank 0's bar is shown).  The loss is
// logged with prog_bar.  Arguments: epochs batches sleep_ms log_every; the Trainer reads
// PL_TRAINER_* (plrun sets the strategy and devices).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <plrt/sdk/exit_code.hpp>
#include <plrt/sdk/trainer.hpp>
#include <thread>

namespace {

class Tiny : public pl::LightningModule {
 public:
  Tiny(int sleep_ms, int log_every) : sleep_ms_(sleep_ms), log_every_(log_every) {
    register_parameter("w", pl::Tensor::zeros({1}));
  }
  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (log_every_ > 0 && batch_idx % log_every_ == 0)
      trainer()->runtime().log(PL_LOG_INFO, "worker line at batch " + std::to_string(batch_idx));
    const double loss = 1.0 / static_cast<double>(batch_idx + 1) + batch.at(0).to_vector<double>().at(0) * 0;
    pl::LogOptions bar;
    bar.prog_bar = true;
    log("loss", loss, bar);
    return loss;
  }
  void validation_step(const pl::Batch&, int64_t batch_idx) override {
    pl::LogOptions bar;
    bar.prog_bar = true;
    log("val_acc", 0.5 + 0.01 * static_cast<double>(batch_idx), bar);
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    return std::make_unique<pl::SGD>(parameters(), pl::SgdOptions{});
  }

 private:
  int sleep_ms_, log_every_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 5) {
      std::cerr << "usage: progress_worker EPOCHS BATCHES SLEEP_MS LOG_EVERY\n";
      return 2;
    }
    pl::TrainerOptions o;
    o.accelerator = "cpu";
    o.max_epochs = std::atoi(argv[1]);
    o.enable_checkpointing = false;
    o.logger = "csv";
    const char* dir = std::getenv("PROGRESS_WORKER_DIR");  // lightning_logs/ goes there
    o.default_root_dir = dir ? dir : ".";
    pl::Trainer trainer(o);
    const int64_t batches = std::atoi(argv[2]) * trainer.world_size();
    std::vector<double> rows(static_cast<size_t>(batches), 1.0);
    auto ds = std::make_shared<pl::TensorDataset>(
        std::vector<pl::Tensor>{pl::Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())})});
    pl::DataLoaderOptions lo;
    lo.batch_size = 1;
    pl::DataLoader train(ds, lo), val(ds, lo);
    Tiny m(std::atoi(argv[3]), std::atoi(argv[4]));
    trainer.fit(m, train, &val);
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "progress_worker: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "progress_worker: " << e.what() << "\n";
    return 1;
  }
}
