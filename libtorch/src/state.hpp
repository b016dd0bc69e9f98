// plrt::torch's process-wide state (the job of init(), the collectives' process group, the DDP
// instances) and the DLPack views that hand torch tensors to plrt without a copy.
#pragma once

#include <ATen/DLConvertor.h>

#include <memory>
#include <mutex>
#include <plrt/sdk/job_context.hpp>
#include <plrt/sdk/process_group.hpp>
#include <plrt/torch.hpp>
#include <string>
#include <vector>

namespace pl::torch::detail {

struct State {
  std::recursive_mutex m;
  std::shared_ptr<pl::JobContext> ctx;
  Job job;
  std::shared_ptr<pl::ProcessGroup> group;  // "plrt.torch": collectives, DDP's checks and buffers
  int ddp_instances = 0;                    // DDPs made in this process (their store key spaces)
  const void* no_sync_owner = nullptr;      // the DDP whose no_sync() scope is open
  std::vector<DdpCore::Impl*> ddps;         // the live DDPs (a ZeroRedundancyOptimizer finds its own)
};

State& state();
// init() with the defaults when the program did not call it.
std::shared_ptr<pl::JobContext> context();
// The job's "plrt.torch" process group (made on first use, a collective); null for one process.
std::shared_ptr<pl::ProcessGroup> group();

// A PL_Tensor over a torch tensor's memory, valid while the view lives (it holds a reference to
// the tensor's storage).
class TensorView {
 public:
  explicit TensorView(const ::torch::Tensor& t);
  TensorView(TensorView&&) noexcept = default;
  TensorView& operator=(TensorView&&) noexcept = default;
  ~TensorView() = default;
  PL_Tensor& get() { return view_; }

 private:
  struct Release {
    void operator()(DLManagedTensor* t) const {
      if (t && t->deleter) t->deleter(t);
    }
  };
  std::unique_ptr<DLManagedTensor, Release> dl_;
  PL_Tensor view_{};
};

// Every rank's `bytes` on rank `to` (a collective; the others get an empty list).
std::vector<std::string> gather_bytes(const std::string& bytes, int to);
// Rank `root`'s text on every rank (a collective).
std::string broadcast_text(const std::string& text, int root);
// Whether `ok` holds on every rank (a collective).
bool all_ranks(bool ok);

std::string shape_text(const ::torch::Tensor& t);
::torch::Device torch_device(PL_Device d);

}  // namespace pl::torch::detail
