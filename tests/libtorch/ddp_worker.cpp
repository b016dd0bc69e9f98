// A libtorch program as a user writes it with plrt::torch, for tests/libtorch: a CNN with
// Conv2d, BatchNorm2d (running statistics are buffers), Linear and a branch forward never uses;
// Adam; two micro-batches per step, the first under no_sync(); gradients set to none between steps
// (libtorch 2.x's zero_grad() default).  Every rank starts from its own random weights (seed +
// rank), so a missing broadcast shows.  The data are a formula of (step, micro-batch, rank, row),
// which tests/libtorch/torch_ddp_reference.py computes the same way.
//
//   ddp_worker --steps 0 --save init.safetensors                  rank 0's initial state, alone
//   plrun --strategy ddp --devices 2 -- ddp_worker --steps 20 --save out.safetensors
//   ddp_worker --bad <case>                                        each bad input of tests/libtorch
//
// --save writes rank 0's parameters and buffers (and, with --save-all, rank r's to <path>.rank<r>).
// Exit codes: 0, 2 for bad input (pl::torch::exit_code_of), 1 otherwise.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/torch.hpp>

namespace {

constexpr int64_t kSide = 8, kClasses = 10;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t out = kClasses, bool extra = false, bool f64 = false, bool meta = false) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * (kSide / 2) * (kSide / 2), out));
    unused = register_module("unused", torch::nn::Linear(8, 8));
    if (extra) register_parameter("extra", torch::zeros({3}));
    if (meta) register_parameter("elsewhere", torch::empty({3}, torch::kMeta));  // not on the job's device
    if (f64) fc->to(torch::kFloat64);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn(conv(x))), 2);
    return fc(x.flatten(1).to(fc->weight.scalar_type()));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr}, unused{nullptr};
};
TORCH_MODULE(Net);

// Row j of micro-batch m of step s on rank r (of world w, batch b): the sample n's pixels.
void batch(int64_t s, int64_t m, int r, int w, int64_t b, torch::Tensor& x, torch::Tensor& y) {
  x = torch::empty({b, 1, kSide, kSide});
  y = torch::empty({b}, torch::kLong);
  auto* px = x.data_ptr<float>();
  auto* py = y.data_ptr<int64_t>();
  for (int64_t j = 0; j < b; ++j) {
    const int64_t n = ((s * 2 + m) * w + r) * b + j;
    py[j] = n % kClasses;
    for (int64_t p = 0; p < kSide * kSide; ++p)
      px[j * kSide * kSide + p] =
          static_cast<float>(static_cast<double>((n * 131 + p * 71 + py[j] * 17) % 97) / 97.0 - 0.5);
  }
}

void save_state(Net& net, const std::string& path) {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  auto put = [&](const std::string& name, const torch::Tensor& t) {
    torch::Tensor c = t.detach().contiguous().to(torch::kCPU);
    if (c.scalar_type() == torch::kLong) {
      std::vector<int64_t> v(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
      out.emplace_back(name, pl::Tensor::from_vector(v, c.sizes().vec()));
    } else {
      c = c.to(torch::kFloat32);
      std::vector<float> v(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      out.emplace_back(name, pl::Tensor::from_vector(v, c.sizes().vec()));
    }
  };
  for (auto& item : net->named_parameters()) put(item.key(), item.value());
  for (auto& item : net->named_buffers()) put(item.key(), item.value());
  pl::safetensors::save(path, out);
}

void load_state(Net& net, const std::string& path) {
  pl::safetensors::File f = pl::safetensors::load(path);
  torch::NoGradGuard no_grad;
  auto get = [&](const std::string& name, torch::Tensor& t) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, path + " has no tensor '" + name + "'");
    if (t.scalar_type() == torch::kLong) {
      auto v = it->second.to_vector<int64_t>();
      t.copy_(torch::tensor(v, torch::kLong).view_as(t));
    } else {
      auto v = it->second.to_vector<float>();
      t.copy_(torch::tensor(v).view_as(t));
    }
  };
  for (auto& item : net->named_parameters()) get(item.key(), item.value());
  for (auto& item : net->named_buffers()) get(item.key(), item.value());
}

// libtorch 2.x's Optimizer::zero_grad() sets the gradients to none; 1.13's zeroes them.  Both ways
// end with what 2.x does by default.
void zero_grad_to_none(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
}

// ZeRO's promise: this rank's Adam state (exp_avg, exp_avg_sq) is at most 1/W of the whole plus the
// largest parameter's, and (with several ranks) less than the whole: a partition.  Prints the
// numbers; false when the promise is broken.
bool check_zero_state(pl::torch::ZeroRedundancyOptimizer<torch::optim::Adam>& zero,
                      const std::vector<torch::Tensor>& params, const pl::torch::Job& job) {
  int64_t mine = 0, whole = 0, largest = 0;
  if (!zero.owned_parameters().empty())
    for (auto& [key, state] : zero.optimizer().state()) {
      auto& s = static_cast<torch::optim::AdamParamState&>(*state);
      mine += s.exp_avg().numel() + s.exp_avg_sq().numel();
    }
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;  // never trained (the unused branch): no state anywhere
    whole += 2 * p.numel();
    largest = std::max<int64_t>(largest, 2 * p.numel());
  }
  const double bound = static_cast<double>(whole) / job.world_size + static_cast<double>(largest);
  std::printf("ddp_worker: rank %d zero state %lld of %lld elements (bound %.0f, %s)\n", job.rank,
              static_cast<long long>(mine), static_cast<long long>(whole), bound, zero.sharded() ? "sharded" : "whole");
  return static_cast<double>(mine) <= bound && (job.world_size == 1 || mine < whole);
}

int run_bad(const std::string& which, const pl::torch::Job& job) {
  torch::manual_seed(1);
  const bool rank1 = job.rank == 1;
  if (which == "shape" || which == "count" || which == "dtype") {
    Net net(which == "shape" && rank1 ? 11 : kClasses, which == "count" && rank1, which == "dtype" && rank1);
    pl::torch::DistributedDataParallel ddp(net);
    return 0;
  }
  Net net(kClasses, false, false, which == "device");
  if (which == "noncontiguous") {
    torch::NoGradGuard no_grad;
    net->fc->weight.set_data(torch::zeros({4 * (kSide / 2) * (kSide / 2), kClasses}).t());  // a transposed view
  }
  pl::torch::DdpOptions o;
  if (which == "dp" || which == "ddp2" || which == "ddp_spawn") o.strategy = which;
  pl::torch::DistributedDataParallel ddp(net, o);
  torch::Tensor x, y;
  batch(0, 0, job.rank, job.world_size, 4, x, y);
  if (which == "grad-shape") {
    net->fc->weight.mutable_grad() = torch::zeros({3});
    torch::nn::functional::cross_entropy(ddp(x), y).backward();
    return 0;
  }
  if (which == "nosync-other") {
    Net other;
    pl::torch::DistributedDataParallel ddp2(other);
    auto guard = ddp.no_sync();
    torch::nn::functional::cross_entropy(ddp2(x), y).backward();
    return 0;
  }
  if (which == "plain-step") {  // under ddp_sharded: optimizer.step() outside ddp.step()
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
    for (int s = 0; s < 2; ++s) {
      auto out = ddp(x);
      (torch::nn::functional::cross_entropy(out, y) + 0 * (net->unused->weight.sum() + net->unused->bias.sum()))
          .backward();
      adam.step();
    }
    return 0;
  }
  if (which == "unused") {  // find_unused_parameters is off and forward skips `unused`
    torch::nn::functional::cross_entropy(ddp(x), y).backward();
    return 0;
  }
  throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--bad '" + which + "' is not a case of this program");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ddp_worker: plrt::torch's DistributedDataParallel in a libtorch program (tests/libtorch)");
  int64_t steps = 20, batch_size = 8;
  uint64_t seed = 7;
  double lr = 0.01;
  std::string save, init, bad;
  bool save_all = false, bucket_view = false, zero = false;
  app.add_option("--steps", steps)->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--seed", seed);
  app.add_option("--lr", lr);
  app.add_option("--init", init, "rank 0's initial state (default: torch::manual_seed(seed))");
  app.add_option("--save", save);
  app.add_flag("--save-all", save_all, "every rank writes <save>.rank<r>");
  app.add_flag("--gradient-as-bucket-view", bucket_view);
  app.add_flag("--zero", zero, "ZeroRedundancyOptimizer<Adam> in place of Adam; checks each rank's state size");
  app.add_option("--bad", bad);
  CLI11_PARSE(app, argc, argv);
  try {
    torch::set_num_threads(1);
    const pl::torch::Job job = pl::torch::init();
    if (pl::torch::init().rank != job.rank) return 1;  // a second call: the same job
    if (!bad.empty()) return run_bad(bad, job);
    torch::manual_seed(seed + static_cast<uint64_t>(job.rank));  // ranks differ until DDP broadcasts
    Net net;
    if (!init.empty() && job.rank == 0) load_state(net, init);
    if (steps == 0) {
      if (!save.empty()) save_state(net, save);
      return 0;
    }
    pl::torch::DdpOptions o;
    o.find_unused_parameters = true;
    o.gradient_as_bucket_view = bucket_view;
    pl::torch::DistributedDataParallel ddp(net, o);
    std::unique_ptr<torch::optim::Adam> adam;
    std::unique_ptr<pl::torch::ZeroRedundancyOptimizer<torch::optim::Adam>> zero_opt;
    std::vector<torch::Tensor> trainable;
    for (auto& p : ddp.module()->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    if (zero)
      zero_opt = std::make_unique<pl::torch::ZeroRedundancyOptimizer<torch::optim::Adam>>(
          trainable, torch::optim::AdamOptions(lr));
    else
      adam = std::make_unique<torch::optim::Adam>(trainable, torch::optim::AdamOptions(lr));
    net->train();
    for (int64_t s = 0; s < steps; ++s) {
      if (zero)
        zero_opt->zero_grad();
      else
        zero_grad_to_none(*adam);
      for (int64_t m = 0; m < 2; ++m) {
        torch::Tensor x, y;
        batch(s, m, job.rank, job.world_size, batch_size, x, y);
        if (m == 0) {
          auto guard = ddp.no_sync();
          (torch::nn::functional::cross_entropy(ddp(x), y) / 2).backward();
        } else {
          (torch::nn::functional::cross_entropy(ddp(x), y) / 2).backward();
        }
      }
      if (zero)
        zero_opt->step();
      else
        ddp.step([&] { adam->step(); });  // the same as adam->step() but under ddp_sharded
    }
    if (zero && !check_zero_state(*zero_opt, trainable, job)) return 1;
    torch::Tensor probe = torch::full({2}, static_cast<double>(job.rank + 1), torch::kFloat64);
    pl::torch::all_reduce(probe);  // 1 + 2 + ... + W
    if (probe[0].item<double>() != job.world_size * (job.world_size + 1) / 2.0) {
      std::cerr << "ddp_worker: all_reduce gave " << probe[0].item<double>() << std::endl;
      return 1;
    }
    if (!save.empty() && job.rank == 0) save_state(net, save);
    if (!save.empty() && save_all) save_state(net, save + ".rank" + std::to_string(job.rank));
    if (job.rank == 0)
      std::printf("ddp_worker: %s x%d, %lld steps, early_launches %.0f\n", ddp.strategy().c_str(), job.world_size,
                  static_cast<long long>(steps), ddp.stat("early_launches"));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddp_worker: " << e.what() << std::endl;
    return pl::torch::exit_code_of(e);
  }
}
