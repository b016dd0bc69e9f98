// plrt-libtorch: a small torch::nn CNN trained with libtorch's autograd and optimizer, wrapped in
// plrt::torch's DistributedDataParallel (<plrt/torch.hpp>): a libtorch program as its author
// writes it, with PyTorch's names.
//
//   plrun --strategy ddp --devices 2 -- plrt-libtorch --steps 200
//   plrun --strategy bagua --devices 2 -- plrt-libtorch --steps 200 --save cnn.safetensors
//   plrun --strategy ddp_sharded --devices 2 -- plrt-libtorch --steps 200
//   torchrun --nproc_per_node 2 --no_python plrt-libtorch --strategy ddp --devices 2
//   plrt-libtorch --steps 0 --save init.safetensors        (one process: the seeded initial weights)
//   plrun --accelerator cuda --devices 1 -- plrt-libtorch   (a CUDA libtorch: the model and batches on
//                                                            the job's GPU, cuda:<local rank>)
//
// The data are synthetic and deterministic (a formula of the sample's index, so that a reference
// in another language computes the same images): 1x16x16 images of 10 classes, each a class
// pattern plus per-image noise, both multiples of 1/1024.  At step s, rank r of W takes the B
// samples starting at ((s * W + r) * B) mod N.  Exit codes: 0 success, 2 invalid input, 1 otherwise.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/options.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/torch.hpp>

namespace {

constexpr int64_t kSide = 16, kPixels = kSide * kSide, kClasses = 10;

// Image n's pixels and label (bench/libtorch_ddp.py and tests/samples compute the same).
void make_sample(int64_t n, uint64_t seed, float* pixels, int64_t* label) {
  const int64_t y = n % kClasses;
  for (int64_t p = 0; p < kPixels; ++p) {
    const uint64_t h =
        (static_cast<uint64_t>(n) * 2654435761ULL + static_cast<uint64_t>(p) * 40503ULL + seed * 97ULL) & 0xffffffffULL;
    const float noise = static_cast<float>(h >> 22) / 1024.0f - 0.5f;
    const float pattern = static_cast<float>((y * 31 + p * 17) % 64) / 64.0f - 0.5f;
    pixels[p] = pattern + noise;  // exact: both are multiples of 1/1024 in [-1, 1)
  }
  *label = y;
}

// The CNN; with `width` > 0 its head is flat-W-W-10 (--width 4400: 20.5 M parameters, the
// communication-bound case of bench/libtorch_ddp.py).
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width = 0)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)))) {
    constexpr int64_t flat = 16 * (kSide / 4) * (kSide / 4);
    if (width > 0) {
      fc1 = register_module("fc1", torch::nn::Linear(flat, width));
      fc2 = register_module("fc2", torch::nn::Linear(width, width));
    }
    fc = register_module("fc", torch::nn::Linear(width > 0 ? width : flat, kClasses));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2).flatten(1);
    if (fc1) x = torch::relu(fc2(torch::relu(fc1(x))));
    return fc(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc{nullptr};
};
TORCH_MODULE(Net);

void load_weights(Net& net, const std::string& path) {
  pl::safetensors::File f = pl::safetensors::load(path);
  torch::NoGradGuard no_grad;
  for (auto& item : net->named_parameters()) {
    auto it = f.tensors.find(item.key());
    if (it == f.tensors.end()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, path + " has no tensor '" + item.key() + "'");
    const pl::Tensor& t = it->second;
    if (t.dtype() != PL_F32 || t.numel() != item.value().numel())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, path + ": '" + item.key() + "' has " + std::to_string(t.numel()) +
                                                   " elements (or is not F32); the model's has " +
                                                   std::to_string(item.value().numel()));
    std::memcpy(item.value().data_ptr<float>(), t.data(), t.nbytes());
  }
}

void save_weights(Net& net, const std::string& path) {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  for (auto& item : net->named_parameters()) {
    torch::Tensor v = item.value().detach().to(torch::kCPU).contiguous();
    std::vector<float> values(v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
    out.emplace_back(item.key(), pl::Tensor::from_vector(values, v.sizes().vec()));
  }
  pl::safetensors::save(path, out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("plrt-libtorch: a libtorch CNN whose gradients plrt's strategies synchronise", "plrt-libtorch");
  int64_t steps = 100, batch_size = 32, samples = 4096, warmup = 5, threads = 1, width = 0;
  bool zero = false;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 42;
  std::string init, save, report, strategy = "auto", devices = "auto", accelerator = "cpu";
  std::vector<std::string> strategy_options;
  app.add_option("--steps", steps, "Optimizer steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch-size", batch_size, "Samples per step and process")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--samples", samples, "Samples in the synthetic set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", seed, "torch::manual_seed for the initial weights, and the data's")->capture_default_str();
  app.add_option("--init", init, "safetensors file with the initial weights (default: seeded init)");
  app.add_option("--save", save, "Write the final weights (safetensors) here (rank 0)");
  app.add_option("--report", report, "Write a JSON summary (steps/s, final loss) here (rank 0)");
  app.add_option("--warmup", warmup, "Steps not timed in steps/s")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--width", width, "The wide head flat-W-W-10 (0: one linear layer)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--zero", zero, "pl::torch::ZeroRedundancyOptimizer<SGD> (each rank keeps its partition's state)");
  app.add_option("--threads", threads, "torch::set_num_threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--strategy", strategy, "plrt strategy (plrun --strategy overrides it)")->capture_default_str();
  app.add_option("--accelerator", accelerator, "cpu, cuda or auto (plrun --accelerator overrides it)")
      ->capture_default_str();
  app.add_option("--devices", devices,
                 "Processes per node under torchrun, srun or mpirun (plrun's --devices overrides it)")
      ->capture_default_str();
  app.add_option("--strategy-option", strategy_options, "KEY=VALUE for the strategy (repeatable)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    torch::set_num_threads(static_cast<int>(threads));
    pl::torch::JobOptions jo;
    jo.strategy = strategy == "auto" ? "ddp" : strategy;
    jo.devices = devices;
    jo.accelerator = accelerator;
    for (const auto& kv : strategy_options) {
      auto [key, value] = pl::parse_option_assignment("--strategy-option", kv);
      pl::set_option(jo.strategy_options, key, value);
    }
    const pl::torch::Job job = pl::torch::init(jo);
    const int rank = job.rank, world = job.world_size;

    torch::manual_seed(seed);
    Net net(width);
    if (!init.empty()) load_weights(net, init);
    net->to(job.device);                          // cuda:<local rank> under a cuda job
    pl::torch::DistributedDataParallel ddp(net);  // rank 0's weights on every rank from here
    double step_lr = lr;
    if (ddp.lr_scale() != 1.0) {  // horovod: the learning rate times the world size
      step_lr = lr * ddp.lr_scale();
      if (rank == 0)
        std::cout << "plrt-libtorch: learning rate " << lr << " -> " << step_lr << " (horovod)" << std::endl;
    }
    const auto sgd = torch::optim::SGDOptions(step_lr).momentum(momentum);
    std::unique_ptr<torch::optim::SGD> opt;
    std::unique_ptr<pl::torch::ZeroRedundancyOptimizer<torch::optim::SGD>> zero_opt;
    if (zero)
      zero_opt = std::make_unique<pl::torch::ZeroRedundancyOptimizer<torch::optim::SGD>>(net->parameters(), sgd);
    else
      opt = std::make_unique<torch::optim::SGD>(net->parameters(), sgd);

    torch::Tensor x = torch::empty({batch_size, 1, kSide, kSide});
    torch::Tensor y = torch::empty({batch_size}, torch::kLong);
    double loss_value = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      if (s == warmup) t0 = std::chrono::steady_clock::now();
      for (int64_t j = 0; j < batch_size; ++j)
        make_sample(((s * world + rank) * batch_size + j) % samples, seed, x.data_ptr<float>() + j * kPixels,
                    y.data_ptr<int64_t>() + j);
      if (zero)
        zero_opt->zero_grad();  // set to none
      else
        opt->zero_grad();  // libtorch 2.x: the gradients set to none; plrt copes
      torch::Tensor loss = torch::nn::functional::cross_entropy(ddp(x.to(job.device)), y.to(job.device));
      loss.backward();  // the gradients are the ranks' mean when it returns
      loss_value = loss.item<double>();
      // through the strategy: under ddp_sharded each rank steps its shard, then the values are
      // gathered (torch's SGD steps whole tensors; exact for an element-wise optimizer)
      if (zero)
        zero_opt->step();  // this rank's partition, then the values shared
      else
        ddp.step([&] { opt->step(); });
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t timed = std::max<int64_t>(0, steps - warmup);
    torch::Tensor mean_loss = torch::tensor({loss_value / world}, torch::kFloat64);
    pl::torch::all_reduce(mean_loss);
    if (rank == 0) {
      const double per_s = timed > 0 && seconds > 0 ? static_cast<double>(timed) / seconds : 0.0;
      std::cout << "plrt-libtorch: " << job.strategy << " x" << world << ", " << steps << " steps, last loss "
                << mean_loss.item<double>() << ", " << per_s << " steps/s" << std::endl;
      if (!save.empty()) save_weights(net, save);
      if (!report.empty()) {
        nlohmann::json j{{"strategy", job.strategy},
                         {"world_size", world},
                         {"steps", steps},
                         {"timed_steps", timed},
                         {"seconds", seconds},
                         {"steps_per_s", per_s},
                         {"loss", mean_loss.item<double>()},
                         {"batch_size", batch_size}};
        // the strategy's statistics this sample knows of (early_launches: buckets started during
        // backward, by the hooks; the rest: time in gradient communication, and the part not hidden)
        nlohmann::json stats = nlohmann::json::object();
        for (const char* name : {"early_launches", "buckets", "allreduce_ms", "exposed_allreduce_ms", "grad_comm_ms",
                                 "exposed_grad_comm_ms"}) {
          try {
            stats[name] = ddp.stat(name);
          } catch (const pl::Error&) {  // not one of this strategy's
          }
        }
        j["strategy_stats"] = stats;
        std::ofstream(report) << j.dump(2) << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "plrt-libtorch: " << e.what() << std::endl;
    return pl::torch::exit_code_of(e);
  }
}
