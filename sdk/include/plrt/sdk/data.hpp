// Data: a Dataset gathers rows into batches of host tensors; a DataLoader walks it in batches,
// in order or shuffled (a permutation drawn from seed + epoch); under a distributed strategy the
// trainer makes it distributed (Lightning's automatic DistributedSampler).
//
// Shuffling draws a permutation of [0, N) by Fisher-Yates from std::mt19937_64 seeded with
// seed + epoch, with an unbiased bounded draw of our own (std::uniform_int_distribution differs
// between standard libraries): the same order on every rank, platform and run.
#pragma once

#include <cstdint>
#include <memory>
#include <plrt/sdk/tensor.hpp>
#include <vector>

namespace pl {

using Batch = std::vector<Tensor>;  // one host tensor per field; dim 0 is the batch

class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  // The rows `indices` (each in [0, size())) of every field, stacked in that order.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

// Fields of equal length along dim 0 (torch.utils.data.TensorDataset): host tensors of any dtype
// and any trailing shape; a batch is a new tensor [k, trailing...] per field (a copy).
class TensorDataset : public Dataset {
 public:
  // Throws on no fields, undefined, 0-d or device tensors, or unequal lengths, naming the field.
  explicit TensorDataset(std::vector<Tensor> fields);
  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& fields() const { return fields_; }

 private:
  std::vector<Tensor> fields_;
  int64_t size_ = 0;
};

// torch.utils.data.DistributedSampler: with shuffle, a permutation of [0, N) drawn from
// seed + epoch (the same on every rank); without drop_last it is padded by wrap-around to a
// multiple of num_replicas, with drop_last the tail is cut; rank r takes positions r, r+W, r+2W...
//
// Resuming inside an epoch (possibly at another world size): set_start(S) hands out only the
// epoch's positions [S, N) of that global order, split the same way: rank r takes S+r, S+r+W, ...
// After k batches of B on each of W ranks, the positions consumed are exactly [0, k*B*W), so a run
// that resumes with set_start(k*B*W) at any world size W' trains every remaining sample once.
// The remainder R = N - S is padded by wrap-around of the epoch's order (position p is order[p % N],
// duplicates of the epoch's first samples) to a multiple of W', or with drop_last its last R % W'
// positions are cut; set_start(0) is torch's sampler.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);        // bad values throw, naming them
  void set_epoch(int64_t epoch) { epoch_ = epoch; }  // keeps start()
  int64_t epoch() const { return epoch_; }
  // The first position of the epoch's global order handed out, in [0, dataset_size]; throws naming a bad value.
  void set_start(int64_t start);
  int64_t start() const { return start_; }
  std::vector<int64_t> indices() const;                 // this rank's, for the current epoch (num_samples of them)
  int64_t num_samples() const { return num_samples_; }  // per rank, from start()
  int64_t dataset_size() const { return n_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }
  uint64_t seed() const { return seed_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }  // positions handed out (from start())
  int64_t padding() const;                                             // duplicated samples added (0 with drop_last)
  // Samples of [first, first + count) of this rank's positions summed over every rank, duplicates
  // (padding) not counted: the rank-local range covers global positions
  // [start + first*W, start + (first + count)*W), of which those < N are real samples.
  int64_t real_samples(int64_t first, int64_t count) const;

 private:
  int64_t n_;
  int num_replicas_, rank_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  int64_t num_samples_;
  void count_samples();
};

struct DataLoaderOptions {
  int64_t batch_size = 1;  // >= 1
  bool shuffle = false;
  bool drop_last = false;  // drop the last incomplete batch
  uint64_t seed = 0;       // shuffling seed; the trainer sets it from seed_everything when unset
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);  // throws on null or batch_size < 1
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return o_; }

  // Makes this loader take rank `rank` of `num_replicas` shards through a DistributedSampler
  // (shuffle, seed and drop_last from the options).  Called by the trainer.
  void distribute(int num_replicas, int rank);
  bool distributed() const { return sampler_ != nullptr; }
  const DistributedSampler* sampler() const { return sampler_.get(); }
  void set_seed(uint64_t seed);  // also the sampler's, when distributed

  void set_epoch(int64_t epoch);  // also the sampler's; a new order when shuffling; another epoch: start 0
  int64_t epoch() const { return epoch_; }
  // Resume inside the current epoch: skip the first `start` positions of the epoch's order (the
  // global order across ranks when distributed, see DistributedSampler::set_start; this loader's
  // own order otherwise).  In [0, dataset().size()]; throws naming a bad value.  Batch 0 is then
  // the first batch after them; set_epoch to another epoch puts start back to 0.
  void set_start(int64_t start);
  int64_t start() const { return start_; }
  int64_t num_samples() const;   // this rank's samples in the epoch (from start())
  int64_t num_batches() const;   // this rank's batches in the epoch (from start())
  Batch batch(int64_t i) const;  // the i-th batch of the current epoch (host tensors); i in [0, num_batches)
  const std::vector<int64_t>& indices() const;  // the current epoch's sample order on this rank (from start())
  // The samples batch i holds summed over every rank of the sampler (this loader's alone when not
  // distributed), not counting the sampler's padding duplicates.  i in [0, num_batches).
  int64_t real_samples(int64_t i) const;
  // The epoch's positions consumed once batches [0, k) are done, counted as set_start counts them
  // (from position 0 of the epoch, start() included); k == num_batches(): the whole epoch
  // (dataset().size(), whatever drop_last or padding left out).  k in [0, num_batches()].
  int64_t position_after(int64_t k) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions o_;
  std::unique_ptr<DistributedSampler> sampler_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  // The epoch's order, computed once per epoch (a permutation of N costs O(N) per batch otherwise);
  // cleared whenever the order changes (epoch, seed, distribute).
  mutable std::vector<int64_t> cached_;
  mutable bool cache_valid_ = false;
};

}  // namespace pl
