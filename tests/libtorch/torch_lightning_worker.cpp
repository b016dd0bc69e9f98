// test_torch_lightning's worker under plrun: torch_lightning::Net trained by pl::Trainer with the
// launcher's strategy (PL_TRAINER_STRATEGY, PL_TRAINER_DEVICES), 4 rows a rank a batch; rank 0
// writes the final weights.  Usage: torch_lightning_worker <weights.pt> <root dir>
#include <iostream>
#include <plrt/sdk/exit_code.hpp>

#include "torch_lightning_net.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: torch_lightning_worker <weights.pt> <root dir>\n";
    return 2;
  }
  try {
    torch_lightning::Net net;
    pl::TrainerOptions o;
    o.accelerator = "cpu";
    o.max_epochs = 2;
    o.accumulate_grad_batches = 2;
    o.gradient_clip_val = 0.05;
    o.enable_progress_bar = false;
    o.num_sanity_val_steps = 0;
    o.default_root_dir = argv[2];
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    pl::DataLoader train(torch_lightning::dataset(24), lo), val(torch_lightning::dataset(8), lo);
    pl::Trainer trainer(o);
    trainer.fit(net, train, &val);
    if (trainer.global_rank() == 0) torch_lightning::save(net, argv[1]);
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "torch_lightning_worker: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "torch_lightning_worker: " << e.what() << "\n";
    return 1;
  }
}
