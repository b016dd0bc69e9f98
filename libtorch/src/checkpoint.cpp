// Checkpoints of a libtorch program's module and optimizer (torch.hpp): rank 0 makes a staging
// folder (pl::AtomicDir) and tells every rank its name; rank 0 writes model.safetensors,
// optimizer.pt (a plain optimizer) and info.json, every rank its ZeRO partition; rank 0 commits
// only when every rank wrote its part, and every rank learns the outcome, so a failure anywhere
// leaves the previous checkpoint whole and no rank runs on believing it saved.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <sstream>

#include "state.hpp"

namespace pl::torch {

namespace {

namespace fs = std::filesystem;

constexpr const char* kInfo = "info.json";
constexpr const char* kModel = "model.safetensors";
constexpr const char* kOptimizer = "optimizer.pt";

std::string rank_file(int r) { return "optimizer.rank" + std::to_string(r) + ".pt"; }

[[noreturn]] void fail(PL_ErrorCode code, const std::string& why) { throw pl::Error(code, why); }

::torch::ScalarType torch_type(PL_DType t, const std::string& what) {
  switch (t) {
    case PL_F32:
      return ::torch::kFloat;
    case PL_F64:
      return ::torch::kDouble;
    case PL_F16:
      return ::torch::kHalf;
    case PL_BF16:
      return ::torch::kBFloat16;
    case PL_I32:
      return ::torch::kInt;
    case PL_I64:
      return ::torch::kLong;
    case PL_U8:
      return ::torch::kByte;
    default:
      fail(PL_ERR_INVALID_ARGUMENT, what + " has a dtype plrt::torch does not know");
  }
}

// Every parameter and buffer of `module`, by dotted name (the names torch's state_dict uses).
std::vector<std::pair<std::string, ::torch::Tensor>> state_tensors(::torch::nn::Module& module) {
  std::vector<std::pair<std::string, ::torch::Tensor>> out;
  for (auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  for (auto& item : module.named_buffers())
    if (item.value().defined()) out.emplace_back(item.key(), item.value());
  return out;
}

void save_model(::torch::nn::Module& module, const std::string& file) {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  for (auto& [name, t] : state_tensors(module)) {
    ::torch::Tensor c = t.detach().to(::torch::kCPU).contiguous();
    detail::TensorView v(c);
    pl::Tensor host = pl::Tensor::empty(c.sizes().vec(), v.get().dtype);
    if (host.nbytes() > 0) std::memcpy(host.data(), c.data_ptr(), host.nbytes());
    out.emplace_back(name, std::move(host));
  }
  pl::safetensors::save(file, out);
}

void load_model(::torch::nn::Module& module, const std::string& file) {
  const pl::safetensors::File f = pl::safetensors::load(file);
  ::torch::NoGradGuard no_grad;
  for (auto& [name, t] : state_tensors(module)) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end())
      fail(PL_ERR_INVALID_ARGUMENT, file + " has no tensor '" + name + "' (the module has it: another model?)");
    const pl::Tensor& saved = it->second;
    const ::torch::ScalarType type = torch_type(saved.dtype(), file + ": '" + name + "'");
    if (saved.numel() != t.numel() || type != t.scalar_type())
      fail(PL_ERR_INVALID_ARGUMENT, file + ": '" + name + "' is " + std::string(c10::toString(type)) + " of " +
                                        std::to_string(saved.numel()) + " elements, but the module's is " +
                                        std::string(c10::toString(t.scalar_type())) + " of " +
                                        std::to_string(t.numel()));
    // in place: the module keeps its memory, so a DDP's views of it stay valid
    t.copy_(::torch::from_blob(saved.data(), t.sizes(), ::torch::TensorOptions().dtype(type)));
  }
}

std::string archive_bytes(const ::torch::optim::Optimizer& opt) {
  ::torch::serialize::OutputArchive a;
  opt.save(a);
  std::ostringstream os;
  a.save_to(os);
  return os.str();
}

}  // namespace

bool checkpoint_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(path) / kInfo, ec) && fs::is_regular_file(fs::path(path) / kModel, ec);
}

void save_checkpoint(const std::string& path, ::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer,
                     const CheckpointInfo& info) {
  detail::save_checkpoint(path, module, &optimizer, nullptr, info);
}

CheckpointInfo load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                               ::torch::optim::Optimizer& optimizer) {
  return detail::load_checkpoint(path, module, &optimizer, nullptr);
}

namespace detail {

void save_checkpoint(const std::string& path, ::torch::nn::Module& module, ::torch::optim::Optimizer* optimizer,
                     ZeroCore* zero, const CheckpointInfo& info) {
  const Job& j = job();
  const std::string who = "pl::torch::save_checkpoint('" + path + "')";
  std::unique_ptr<pl::AtomicDir> dir;
  std::string told;
  if (j.rank == 0) {
    try {
      if (path.empty()) fail(PL_ERR_INVALID_ARGUMENT, "the path is empty");
      pl::clean_atomic_leftovers(path);
      dir = std::make_unique<pl::AtomicDir>(path);
      told = "ok:" + dir->temp_path();
    } catch (const std::exception& e) {
      told = std::string("error:") + e.what();
    }
  }
  told = broadcast_text(told, 0);
  if (told.rfind("error:", 0) == 0)
    fail(PL_ERR_RUNTIME, who + ": rank 0 could not make the staging folder: " + told.substr(6));
  const std::string staging = told.substr(3);
  std::string mine;  // this rank's failure
  try {
    if (zero) pl::write_file_atomic(staging + "/" + rank_file(j.rank), zero->save_partition());
    if (j.rank == 0) {
      save_model(module, staging + "/" + kModel);
      if (optimizer) dir->write(kOptimizer, archive_bytes(*optimizer));
      nlohmann::json doc{{"format", "plrt.torch.checkpoint/1"},
                         {"step", info.step},
                         {"world_size", j.world_size},
                         {"optimizer", zero ? (zero->sharded() ? "zero-sharded" : "zero") : "whole"},
                         {"values", info.values}};
      dir->write(kInfo, doc.dump(2) + "\n");
    }
  } catch (const std::exception& e) {
    mine = e.what();
  }
  if (!all_ranks(mine.empty()))
    fail(PL_ERR_RUNTIME, who + ": " +
                             (mine.empty() ? "another rank failed to write its part (its error says why)" : mine) +
                             "; the previous checkpoint there, if any, is kept");
  std::string commit_error;
  if (j.rank == 0) {
    try {
      dir->commit();
    } catch (const std::exception& e) {
      commit_error = e.what();
    }
  }
  if (!all_ranks(commit_error.empty()))
    fail(PL_ERR_RUNTIME, who + ": rank 0 could not commit it" + (commit_error.empty() ? "" : ": " + commit_error));
}

CheckpointInfo load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                               ::torch::optim::Optimizer* optimizer, ZeroCore* zero) {
  const Job& j = job();
  const std::string who = "pl::torch::load_checkpoint('" + path + "')";
  if (!checkpoint_exists(path))
    fail(PL_ERR_INVALID_ARGUMENT, who + ": no checkpoint there (" + kInfo + " and " + kModel +
                                      " are missing); check checkpoint_exists first to start afresh");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(pl::read_file(path + "/" + kInfo));
  } catch (const nlohmann::json::exception& e) {
    fail(PL_ERR_INVALID_ARGUMENT, who + ": " + kInfo + " is not valid JSON: " + e.what());
  }
  CheckpointInfo info;
  try {
    info.step = doc.at("step").get<int64_t>();
    info.world_size = doc.at("world_size").get<int>();
    info.values = doc.at("values").get<std::map<std::string, double>>();
  } catch (const nlohmann::json::exception& e) {
    fail(PL_ERR_INVALID_ARGUMENT, who + ": " + kInfo + " lacks a field: " + e.what());
  }
  const std::string kind = doc.value("optimizer", "");
  const std::string wanted = zero ? (zero->sharded() ? "zero-sharded" : "zero") : "whole";
  if (kind != wanted)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": its optimizer state was saved as '" + kind + "' but is loaded into a" +
                                      (zero ? " ZeroRedundancyOptimizer" : "n optimizer") + " ('" + wanted +
                                      "'); load it with the same kind of optimizer and strategy");
  load_model(module, path + "/" + kModel);
  if (optimizer) {
    ::torch::serialize::InputArchive a;
    try {
      a.load_from(path + "/" + kOptimizer, j.device);
    } catch (const c10::Error& e) {
      fail(PL_ERR_INVALID_ARGUMENT, who + ": " + kOptimizer + " cannot be read: " + e.what_without_backtrace());
    }
    optimizer->load(a);
  }
  if (zero) {
    std::vector<std::string> files;
    for (int r = 0; r < info.world_size; ++r) files.push_back(pl::read_file(path + "/" + rank_file(r)));
    zero->load_partitions(files);
  }
  return info;
}

}  // namespace detail

}  // namespace pl::torch
