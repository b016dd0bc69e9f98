// libtorch datasets as the Trainer's data: a torch::data dataset (your own
// torch::data::datasets::Dataset, torch::data::datasets::MNIST, either after .map(transform)) read
// through pl::DataLoader, so the Trainer injects the DistributedSampler, shuffles per epoch with
// the job's seed, resumes inside an epoch and counts limit_*_batches as for its own loaders.
//
//   auto train = pl::torch::data_loader(
//       torch::data::datasets::MNIST(root).map(torch::data::transforms::Normalize<>(0.1307, 0.3081)),
//       pl::DataLoaderOptions{.batch_size = 64, .shuffle = true});
//   trainer.fit(net, train, &val);
//
// A batch of Examples becomes the training_step's Batch {data stacked, target stacked} (a dataset
// of TensorExample: {data stacked}); after .map(torch::data::transforms::Stack<>()) the dataset's
// own stacking is taken as it is.  The tensors are copied into host memory once per batch, as
// torch.utils.data's default collate does.  A torch::data::DataLoader (make_data_loader) owns its
// sampler, which the Trainer cannot replace; hand its dataset here instead.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <plrt/sdk/data.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace pl::torch {

namespace detail {

// Host pl::Tensors holding copies of `fields` (each made contiguous and moved to the CPU first);
// an undefined or 0-d field, or a dtype plrt has no name for, throws pl::Error naming its place.
pl::Batch to_host_batch(const std::vector<::torch::Tensor>& fields);
// The dataset's size, or pl::Error when it has none (an unsized, streaming dataset).
int64_t require_size(const c10::optional<size_t>& size);

inline pl::Batch stack_examples(const std::vector<::torch::data::Example<>>& examples) {
  std::vector<::torch::Tensor> data, target;
  for (const auto& e : examples) data.push_back(e.data), target.push_back(e.target);
  return to_host_batch({::torch::stack(data), ::torch::stack(target)});
}
inline pl::Batch stack_examples(const std::vector<::torch::data::TensorExample>& examples) {
  std::vector<::torch::Tensor> data;
  for (const auto& e : examples) data.push_back(e.data);
  return to_host_batch({::torch::stack(data)});
}
inline pl::Batch stack_examples(const ::torch::data::Example<>& stacked) {
  return to_host_batch({stacked.data, stacked.target});
}
inline pl::Batch stack_examples(const ::torch::data::TensorExample& stacked) { return to_host_batch({stacked.data}); }

}  // namespace detail

// A libtorch dataset as a pl::Dataset.  D: a torch::data BatchDataset with a size (every
// torch::data::datasets::Dataset, and .map(...) of one).  get_batch is called from the loader's
// thread; libtorch's datasets are not const, so the adapter keeps its own copy of `dataset`.
template <class D>
class Dataset final : public pl::Dataset {
 public:
  explicit Dataset(D dataset) : d_(std::move(dataset)), size_(detail::require_size(d_.size())) {}
  int64_t size() const override { return size_; }
  pl::Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::vector<size_t> at(indices.begin(), indices.end());
    return detail::stack_examples(d_.get_batch(at));
  }

 private:
  mutable D d_;
  int64_t size_;
};

// pl::DataLoader over a libtorch dataset (the Trainer distributes it as its own).
template <class D>
pl::DataLoader data_loader(D dataset, pl::DataLoaderOptions options = {}) {
  return pl::DataLoader(std::make_shared<Dataset<D>>(std::move(dataset)), options);
}

}  // namespace pl::torch
