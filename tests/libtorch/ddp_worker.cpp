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
#include <cmath>
#include <cstdio>
#include <iostream>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/torch.hpp>

namespace {

constexpr int64_t kSide = 8, kClasses = 10;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t out = kClasses, bool extra = false, bool f64 = false, bool meta = false, bool norm = true) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1).bias(false)));
    if (norm) bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * (kSide / 2) * (kSide / 2), out));
    unused = register_module("unused", torch::nn::Linear(8, 8));
    if (extra) register_parameter("extra", torch::zeros({3}));
    if (meta) register_parameter("elsewhere", torch::empty({3}, torch::kMeta));  // not on the job's device
    if (f64) fc->to(torch::kFloat64);
    // frozen (requires_grad false): divides the logits; ranks other than 0 start with another value
    temperature = register_parameter("temperature", torch::ones({1}), /*requires_grad=*/false);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = conv(x);
    if (bn) x = bn(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    return fc(x.flatten(1).to(fc->weight.scalar_type())) / temperature.to(fc->weight.scalar_type());
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr}, unused{nullptr};
  torch::Tensor temperature;
};
TORCH_MODULE(Net);

// Row j of micro-batch m of step s on rank r (of world w, batch b): the sample n's pixels.
// With `global` > 0 the step's micro-batch is `global` samples split across the ranks (the same
// samples whatever the world size; a resume at another world size sees what the uninterrupted run
// saw), and `b` is ignored.
void batch(int64_t s, int64_t m, int r, int w, int64_t b, torch::Tensor& x, torch::Tensor& y, int64_t global = 0) {
  if (global > 0) b = global / w;
  x = torch::empty({b, 1, kSide, kSide});
  y = torch::empty({b}, torch::kLong);
  auto* px = x.data_ptr<float>();
  auto* py = y.data_ptr<int64_t>();
  for (int64_t j = 0; j < b; ++j) {
    const int64_t n = global > 0 ? (s * 2 + m) * global + r * b + j : ((s * 2 + m) * w + r) * b + j;
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

// scikit-learn's digits (scripts/get-digits: x [N, 64] in 0..1, y [N]) as a libtorch user trains
// them: every sixth row held out, the rest drawn by libtorch's DistributedRandomSampler (each rank
// its share, reshuffled per epoch), the CNN with Adam under DDP, then the held-out accuracy (every
// rank evaluates the whole held-out set; rank 0 prints it).
int run_digits(const std::string& path, const pl::torch::Job& job, int64_t epochs, int64_t batch_size, double lr) {
  pl::safetensors::File f = pl::safetensors::load(path);
  const auto xs = f.tensors.at("x").to_vector<float>();
  const auto ys = f.tensors.at("y").to_vector<int64_t>();
  const auto n = static_cast<int64_t>(ys.size());
  torch::Tensor x = torch::tensor(xs).view({n, 1, kSide, kSide}) - 0.5, y = torch::tensor(ys, torch::kLong);
  std::vector<int64_t> train_rows, held_rows;
  for (int64_t i = 0; i < n; ++i) (i % 6 == 0 ? held_rows : train_rows).push_back(i);
  torch::Tensor train_idx = torch::tensor(train_rows, torch::kLong), held_idx = torch::tensor(held_rows, torch::kLong);
  torch::manual_seed(11);
  Net net;
  pl::torch::DdpOptions o;
  o.find_unused_parameters = true;  // the unused branch
  pl::torch::DistributedDataParallel ddp(net, o);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(lr));
  torch::data::samplers::DistributedRandomSampler sampler(train_rows.size(), static_cast<size_t>(job.world_size),
                                                          static_cast<size_t>(job.rank));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    net->train();
    sampler.set_epoch(static_cast<size_t>(epoch));
    sampler.reset();
    while (auto batch = sampler.next(static_cast<size_t>(batch_size))) {
      std::vector<int64_t> picked(batch->begin(), batch->end());
      torch::Tensor rows = train_idx.index_select(0, torch::tensor(picked, torch::kLong));
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp(x.index_select(0, rows)), y.index_select(0, rows)).backward();
      opt.step();
    }
  }
  net->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor pred = ddp(x.index_select(0, held_idx)).argmax(1);
  torch::Tensor correct = (pred == y.index_select(0, held_idx)).sum().to(torch::kFloat64).reshape({1});
  pl::torch::all_reduce(correct, pl::torch::ReduceOp::AVG);  // every rank evaluated the same rows
  const double accuracy = correct.item<double>() / static_cast<double>(held_rows.size());
  if (job.rank == 0)
    std::printf("ddp_worker: digits x%d, %lld epochs, held-out accuracy %.4f on %zu rows\n", job.world_size,
                static_cast<long long>(epochs), accuracy, held_rows.size());
  return 0;
}

// The optimizer's state entry of `t` (libtorch 1.x keys it by the text of the TensorImpl's address,
// later versions by the address).
template <class Map>
auto find_state(Map& states, const torch::Tensor& t) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>)
    return states.find(c10::guts::to_string(t.unsafeGetTensorImpl()));
  else
    return states.find(reinterpret_cast<Key>(t.unsafeGetTensorImpl()));
}

// Adam's state (exp_avg, exp_avg_sq) of every parameter that has one, by "<name>.exp_avg".
void save_adam_state(torch::optim::Optimizer& opt, Net& net, const std::string& path) {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  auto put = [&](const std::string& name, const torch::Tensor& t) {
    torch::Tensor c = t.detach().contiguous().to(torch::kFloat32);
    out.emplace_back(name,
                     pl::Tensor::from_vector(std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel()),
                                             c.sizes().vec()));
  };
  for (auto& item : net->named_parameters()) {
    auto it = find_state(opt.state(), item.value());
    if (it == opt.state().end()) continue;
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    put(item.key() + ".exp_avg", s.exp_avg());
    put(item.key() + ".exp_avg_sq", s.exp_avg_sq());
  }
  pl::safetensors::save(path, out);
}

// Each of torch.distributed's collectives through pl::torch at this world size, against values
// every rank can compute; prints "collectives ok" (rank 0) or the first wrong value (exit 1).
int run_collectives(const pl::torch::Job& job) {
  const int w = job.world_size, r = job.rank;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error("rank " + std::to_string(r) + ": " + what + " is wrong");
  };
  auto mine = [&] { return torch::tensor({1.0 + r, 2.0 * (r + 1)}, torch::kFloat64); };
  const double n = w, sum = n * (n + 1) / 2;  // 1 + 2 + ... + w
  torch::Tensor t = mine();
  pl::torch::all_reduce(t);
  expect(t[0].item<double>() == sum && t[1].item<double>() == 2 * sum, "all_reduce SUM");
  t = mine();
  pl::torch::all_reduce(t, pl::torch::ReduceOp::AVG);
  expect(std::fabs(t[0].item<double>() - sum / n) < 1e-12, "all_reduce AVG");
  t = mine();
  pl::torch::all_reduce(t, pl::torch::ReduceOp::MIN);
  expect(t[0].item<double>() == 1.0, "all_reduce MIN");
  t = mine();
  pl::torch::all_reduce(t, pl::torch::ReduceOp::MAX);
  expect(t[0].item<double>() == n, "all_reduce MAX");
  t = mine();
  pl::torch::all_reduce(t, pl::torch::ReduceOp::PRODUCT);
  double factorial = 1;
  for (int k = 1; k <= w; ++k) factorial *= k;
  expect(t[0].item<double>() == factorial, "all_reduce PRODUCT");
  torch::Tensor b = torch::full({3}, static_cast<float>(r));
  pl::torch::broadcast(b, w - 1);
  expect(b.eq(static_cast<float>(w - 1)).all().item<bool>(), "broadcast from the last rank");
  std::vector<torch::Tensor> list;
  for (int k = 0; k < w; ++k) list.push_back(torch::empty({2}, torch::kInt64));
  pl::torch::all_gather(list, torch::tensor({int64_t{r}, int64_t{10 * r}}, torch::kInt64));
  for (int k = 0; k < w; ++k) expect(list[k][1].item<int64_t>() == 10 * k, "all_gather's part " + std::to_string(k));
  torch::Tensor stacked = pl::torch::all_gather(torch::full({2, 2}, static_cast<float>(r)));
  expect(stacked.sizes() == torch::IntArrayRef({w, 2, 2}) && stacked[w - 1][1][1].item<float>() == w - 1,
         "all_gather stacked");
  std::vector<torch::Tensor> inputs;
  for (int k = 0; k < w; ++k) inputs.push_back(torch::full({4}, static_cast<float>(100 * r + k)));
  torch::Tensor out = torch::empty({4});
  pl::torch::reduce_scatter(out, inputs);
  expect(out[0].item<float>() == static_cast<float>(100 * (sum - n) + n * r), "reduce_scatter SUM");
  pl::torch::barrier();
  if (r == 0) std::printf("ddp_worker: collectives ok at %d ranks\n", w);
  return 0;
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
  o.find_unused_parameters = which == "outside-use";
  pl::torch::DistributedDataParallel ddp(net, o);
  torch::Tensor x, y;
  batch(0, 0, job.rank, job.world_size, 4, x, y);
  if (which == "collective-noncontiguous") {
    torch::Tensor t = torch::zeros({4, 3}).t();
    pl::torch::all_reduce(t);
    return 0;
  }
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
  if (which == "plain-step") {  // under ddp_sharded or bagua: optimizer.step() outside ddp.step()
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
    for (int s = 0; s < 2; ++s) {
      auto out = ddp(x);
      (torch::nn::functional::cross_entropy(out, y) + 0 * (net->unused->weight.sum() + net->unused->bias.sum()))
          .backward();
      adam.step();
    }
    return 0;
  }
  if (which == "outside-use") {  // a loss term from a parameter forward never used
    (torch::nn::functional::cross_entropy(ddp(x), y) + 0 * net->unused->weight.sum()).backward();
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
  std::string save, init, bad, digits;
  int64_t epochs = 15;
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
  app.add_option("--digits", digits, "train on scikit-learn's digits (scripts/get-digits) and print the accuracy");
  app.add_option("--epochs", epochs, "--digits: epochs")->check(CLI::PositiveNumber);
  std::string checkpoint;
  int64_t stop_at = -1, global_batch = 0;
  bool no_norm = false, collectives = false;
  app.add_flag("--collectives", collectives, "check each collective and exit");
  std::string save_optim;
  app.add_option("--save-optim", save_optim,
                 "rank 0 writes Adam's state here (with --zero: consolidate_state_dict(0)'s)");
  app.add_option("--checkpoint", checkpoint, "resume from this checkpoint when it exists; with --stop-at, save it");
  app.add_option("--stop-at", stop_at, "save --checkpoint after this many steps and stop");
  app.add_option("--global-batch", global_batch, "samples per micro-batch across the job (divisible by W)");
  app.add_flag("--no-norm", no_norm, "no BatchNorm (its statistics are per rank, so per world size)");
  std::string stat_name;
  app.add_option("--stat", stat_name, "rank 0 prints this strategy statistic at the end ('stat <name> <value>')");
  CLI11_PARSE(app, argc, argv);
  try {
    torch::set_num_threads(1);
    const pl::torch::Job job = pl::torch::init();
    if (pl::torch::init().rank != job.rank) return 1;  // a second call: the same job
    if (!bad.empty()) return run_bad(bad, job);
    if (!digits.empty()) return run_digits(digits, job, epochs, batch_size, lr);
    if (collectives) return run_collectives(job);
    torch::manual_seed(seed + static_cast<uint64_t>(job.rank));  // ranks differ until DDP broadcasts
    Net net(kClasses, false, false, false, !no_norm);
    if (!init.empty() && job.rank == 0) load_state(net, init);
    if (job.rank != 0) {  // a frozen parameter that differs until DDP broadcasts rank 0's
      torch::NoGradGuard no_grad;
      net->temperature.fill_(1.0 + 0.25 * job.rank);
    }
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
    int64_t first = 0;
    if (!checkpoint.empty() && pl::torch::checkpoint_exists(checkpoint)) {
      const pl::torch::CheckpointInfo info = zero ? pl::torch::load_checkpoint(checkpoint, *net, *zero_opt)
                                                  : pl::torch::load_checkpoint(checkpoint, *net, *adam);
      first = info.step;
      if (job.rank == 0)
        std::printf("ddp_worker: resumed at step %lld (saved by %d ranks, tag %.1f)\n", static_cast<long long>(first),
                    info.world_size, info.values.at("tag"));
    }
    for (int64_t s = first; s < steps; ++s) {
      if (s == stop_at) {
        pl::torch::CheckpointInfo info;
        info.step = s;
        info.values["tag"] = 42.5;
        if (zero)
          pl::torch::save_checkpoint(checkpoint, *net, *zero_opt, info);
        else
          pl::torch::save_checkpoint(checkpoint, *net, *adam, info);
        if (job.rank == 0) std::printf("ddp_worker: saved at step %lld\n", static_cast<long long>(s));
        return 0;
      }
      if (zero)
        zero_opt->zero_grad();
      else
        zero_grad_to_none(*adam);
      for (int64_t m = 0; m < 2; ++m) {
        torch::Tensor x, y;
        batch(s, m, job.rank, job.world_size, batch_size, x, y, global_batch);
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
    ddp.sync_weights();  // bagua_async: every rank rank 0's weights; nothing under the others
    if (zero && !check_zero_state(*zero_opt, trainable, job)) return 1;
    if (!save_optim.empty()) {
      if (zero) {
        auto all = zero_opt->consolidate_state_dict(0);  // a collective; null off rank 0
        if ((all != nullptr) != (job.rank == 0)) return 1;
        if (all) save_adam_state(*all, net, save_optim);
      } else if (job.rank == 0) {
        save_adam_state(*adam, net, save_optim);
      }
    }
    torch::Tensor probe = torch::full({2}, static_cast<double>(job.rank + 1), torch::kFloat64);
    pl::torch::all_reduce(probe);  // 1 + 2 + ... + W
    if (probe[0].item<double>() != job.world_size * (job.world_size + 1) / 2.0) {
      std::cerr << "ddp_worker: all_reduce gave " << probe[0].item<double>() << std::endl;
      return 1;
    }
    if (!save.empty() && job.rank == 0) save_state(net, save);
    if (!save.empty() && save_all) save_state(net, save + ".rank" + std::to_string(job.rank));
    if (job.rank == 0 && !stat_name.empty())
      std::printf("ddp_worker: stat %s %.17g\n", stat_name.c_str(), ddp.stat(stat_name));
    if (job.rank == 0)
      std::printf("ddp_worker: %s x%d, %lld steps, early_launches %.0f\n", ddp.strategy().c_str(), job.world_size,
                  static_cast<long long>(steps), ddp.stat("early_launches"));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddp_worker: " << e.what() << std::endl;
    return pl::torch::exit_code_of(e);
  }
}
