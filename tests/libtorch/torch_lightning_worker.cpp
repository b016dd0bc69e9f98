// test_torch_lightning's worker under plrun: torch_lightning::Net trained by pl::Trainer with the
// launcher's strategy (PL_TRAINER_STRATEGY, PL_TRAINER_DEVICES), accumulate 2, clip 0.05; rank 0
// writes the final weights.
//   torch_lightning_worker <weights.safetensors> <root dir> [--rows N] [--batch B] [--epochs E] [--step-lr]
//                          [--resume CKPT] [--precision P] [--torch-dataset] [--accelerator A]
//   torch_lightning_worker --write-inputs <in.safetensors> [--rows N]
// Defaults: 24 rows of torch_lightning::dataset, 4 rows a rank a batch, 2 epochs, no schedule, cpu;
// --torch-dataset reads the rows through a libtorch dataset (pl::torch::data_loader);
// --write-inputs writes torch_lightning_reference.py's --data file and trains nothing.
#include <fstream>
#include <iostream>
#include <plrt/sdk/exit_code.hpp>
#include <string>

#include "torch_lightning_net.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: torch_lightning_worker <weights.safetensors> <root dir> [--rows N] [--batch B] [--epochs E] "
                 "[--step-lr] [--resume CKPT] [--precision P] [--torch-dataset] [--accelerator A]\n"
                 "       torch_lightning_worker --write-inputs <in.safetensors> [--rows N]\n";
    return 2;
  }
  const bool write_inputs = std::string(argv[1]) == "--write-inputs";
  int64_t rows = 24, batch = 4, epochs = 2;
  bool step_lr = false, torch_dataset = false;
  std::string resume, precision = "32-true", accelerator = "cpu";
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--step-lr") {
      step_lr = true;
    } else if (a == "--torch-dataset") {
      torch_dataset = true;
    } else if (a == "--rows" && has_value) {
      rows = std::stoll(argv[++i]);
    } else if (a == "--batch" && has_value) {
      batch = std::stoll(argv[++i]);
    } else if (a == "--epochs" && has_value) {
      epochs = std::stoll(argv[++i]);
    } else if (a == "--resume" && has_value) {
      resume = argv[++i];
    } else if (a == "--precision" && has_value) {
      precision = argv[++i];
    } else if (a == "--accelerator" && has_value) {
      accelerator = argv[++i];
    } else {
      std::cerr << "torch_lightning_worker: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  try {
    if (write_inputs) {
      torch_lightning::write_inputs(argv[2], rows);
      return 0;
    }
    torch_lightning::Net net;
    net.step_lr = step_lr;
    pl::TrainerOptions o;
    o.accelerator = accelerator;
    o.max_epochs = epochs;
    o.precision = precision;
    o.accumulate_grad_batches = 2;
    o.gradient_clip_val = 0.05;
    o.enable_progress_bar = false;
    o.num_sanity_val_steps = 0;
    o.default_root_dir = argv[2];
    pl::DataLoader train = torch_lightning::loader(rows, batch, torch_dataset),
                   val = torch_lightning::loader(8, batch, torch_dataset);
    pl::Trainer trainer(o);
    trainer.fit(net, train, &val, resume);
    if (trainer.global_rank() == 0) {
      torch_lightning::save(net, argv[1]);
      std::ofstream gathered(std::string(argv[1]) + ".gathered");  // the last all_gather, row by row
      for (int64_t r = 0; r < net.gathered.size(0); ++r)
        gathered << net.gathered[r][0].item<double>() << " " << net.gathered[r][1].item<double>() << "\n";
    }
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "torch_lightning_worker: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "torch_lightning_worker: " << e.what() << "\n";
    return 1;
  }
}
