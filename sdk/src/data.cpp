// Datasets, torch's DistributedSampler and the DataLoader (see data.hpp).
#include <algorithm>
#include <cstring>
#include <plrt/sdk/data.hpp>
#include <random>

namespace pl {

namespace {

// Uniform in [0, bound) without modulo bias (reject the low values that make 2^64 uneven).
uint64_t bounded(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

// Fisher-Yates over [0, n) from mt19937_64(seed): the same permutation on every rank.
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937_64 gen(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t j = bounded(gen, static_cast<uint64_t>(i) + 1);
    std::swap(p[static_cast<size_t>(i)], p[j]);
  }
  return p;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace

Dataset::~Dataset() = default;

// ---- TensorDataset ----

TensorDataset::TensorDataset(std::vector<Tensor> fields) : fields_(std::move(fields)) {
  if (fields_.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "TensorDataset needs at least one field (got none)");
  for (size_t f = 0; f < fields_.size(); ++f) {
    const Tensor& t = fields_[f];
    const std::string which = "TensorDataset field " + std::to_string(f);
    if (!t.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, which + " is an undefined tensor");
    if (!t.is_host())
      throw Error(PL_ERR_INVALID_ARGUMENT, which + " lives on a device; datasets hold host tensors (use to_host())");
    if (t.dim() == 0) throw Error(PL_ERR_INVALID_ARGUMENT, which + " is 0-d; its dim 0 must index the samples");
    if (t.size(0) != fields_[0].size(0))
      throw Error(PL_ERR_INVALID_ARGUMENT, which + " has " + std::to_string(t.size(0)) + " rows (shape " +
                                               shape_text(t.shape()) + ") but field 0 has " +
                                               std::to_string(fields_[0].size(0)) + "; all fields need equal lengths");
  }
  size_ = fields_[0].size(0);
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (size_t k = 0; k < indices.size(); ++k)
    if (indices[k] < 0 || indices[k] >= size_)
      throw Error(PL_ERR_INVALID_ARGUMENT, "TensorDataset::get_batch: index " + std::to_string(indices[k]) +
                                               " (position " + std::to_string(k) + ") is outside [0, " +
                                               std::to_string(size_) + ")");
  Batch out;
  out.reserve(fields_.size());
  for (const Tensor& t : fields_) {
    Shape shape = t.shape();
    shape[0] = static_cast<int64_t>(indices.size());
    Tensor b = Tensor::empty(shape, t.dtype());
    const size_t row = size_ == 0 ? 0 : t.nbytes() / static_cast<size_t>(size_);
    const char* src = static_cast<const char*>(t.data());
    char* dst = static_cast<char*>(b.data());
    for (size_t k = 0; k < indices.size() && row > 0; ++k)
      std::memcpy(dst + k * row, src + static_cast<size_t>(indices[k]) * row, row);
    out.push_back(std::move(b));
  }
  return out;
}

// ---- DistributedSampler ----

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  if (num_replicas < 1)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "DistributedSampler: num_replicas " + std::to_string(num_replicas) + " must be at least 1");
  if (rank < 0 || rank >= num_replicas)
    throw Error(PL_ERR_INVALID_ARGUMENT, "DistributedSampler: rank " + std::to_string(rank) + " is outside [0, " +
                                             std::to_string(num_replicas) + ") (num_replicas " +
                                             std::to_string(num_replicas) + ")");
  if (dataset_size < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "DistributedSampler: dataset size " + std::to_string(dataset_size) + " must be non-negative");
  count_samples();
}

// torch: ceil((N - W) / W) when drop_last and N % W != 0, else ceil(N / W).  For N % W != 0 the
// former equals floor(N / W) (and is 0 for N < W, as math.ceil of a value in (-1, 0)); from a
// start S the same over the R = N - S remaining positions.
void DistributedSampler::count_samples() {
  const int64_t w = num_replicas_, r = n_ - start_;
  num_samples_ = drop_last_ ? r / w : (r + w - 1) / w;
}

void DistributedSampler::set_start(int64_t start) {
  if (start < 0 || start > n_)
    throw Error(PL_ERR_INVALID_ARGUMENT, "DistributedSampler: start " + std::to_string(start) + " is outside [0, " +
                                             std::to_string(n_) + "] (the dataset's size " + std::to_string(n_) + ")");
  start_ = start;
  count_samples();
}

int64_t DistributedSampler::padding() const { return drop_last_ ? 0 : total_size() - (n_ - start_); }

int64_t DistributedSampler::real_samples(int64_t first, int64_t count) const {
  const int64_t lo = start_ + first * num_replicas_, hi = start_ + (first + count) * num_replicas_;
  return std::max<int64_t>(0, std::min(hi, n_) - lo);
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all = shuffle_ ? permutation(n_, seed_ + static_cast<uint64_t>(epoch_)) : iota(n_);
  // Padding by wrap-around, several times over when it exceeds N (torch repeats the list), or
  // the tail cut with drop_last: either way position i of the total list is all[i % N].  From a
  // start S the positions are S + rank, S + rank + W, ...
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t pos = start_ + rank_; pos < start_ + total_size(); pos += num_replicas_)
    mine.push_back(all[static_cast<size_t>(pos % n_)]);
  return mine;
}

// ---- DataLoader ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), o_(options) {
  if (!dataset_) throw Error(PL_ERR_INVALID_ARGUMENT, "DataLoader: the dataset is null");
  if (o_.batch_size < 1)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "DataLoader: batch_size " + std::to_string(o_.batch_size) + " must be at least 1");
}

void DataLoader::distribute(int num_replicas, int rank) {
  auto s =
      std::make_unique<DistributedSampler>(dataset_->size(), num_replicas, rank, o_.shuffle, o_.seed, o_.drop_last);
  s->set_epoch(epoch_);
  s->set_start(start_);
  sampler_ = std::move(s);
  cache_valid_ = false;
}

void DataLoader::set_seed(uint64_t seed) {
  o_.seed = seed;
  if (sampler_) distribute(sampler_->num_replicas(), sampler_->rank());
  cache_valid_ = false;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  start_ = 0;
  if (sampler_) sampler_->set_epoch(epoch), sampler_->set_start(0);
  cache_valid_ = false;
}

void DataLoader::set_start(int64_t start) {
  if (start < 0 || start > dataset_->size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "DataLoader::set_start(" + std::to_string(start) + "): valid starts are [0, " +
                                             std::to_string(dataset_->size()) + "] (the dataset's size)");
  if (start == start_) return;
  start_ = start;
  if (sampler_) sampler_->set_start(start);
  cache_valid_ = false;
}

int64_t DataLoader::num_samples() const { return sampler_ ? sampler_->num_samples() : dataset_->size() - start_; }

int64_t DataLoader::real_samples(int64_t i) const {
  const int64_t nb = num_batches();
  if (i < 0 || i >= nb)
    throw Error(PL_ERR_INVALID_ARGUMENT, "DataLoader::real_samples(" + std::to_string(i) + "): valid batches are [0, " +
                                             std::to_string(nb) + ")");
  const int64_t rows = std::min(o_.batch_size, num_samples() - i * o_.batch_size);
  return sampler_ ? sampler_->real_samples(i * o_.batch_size, rows) : rows;
}

int64_t DataLoader::position_after(int64_t k) const {
  const int64_t nb = num_batches();
  if (k < 0 || k > nb)
    throw Error(PL_ERR_INVALID_ARGUMENT, "DataLoader::position_after(" + std::to_string(k) +
                                             "): valid counts are [0, " + std::to_string(nb) + "]");
  if (k == nb) return dataset_->size();
  return start_ + k * o_.batch_size * (sampler_ ? sampler_->num_replicas() : 1);
}

int64_t DataLoader::num_batches() const {
  const int64_t n = num_samples(), b = o_.batch_size;
  return o_.drop_last ? n / b : (n + b - 1) / b;
}

const std::vector<int64_t>& DataLoader::indices() const {
  if (!cache_valid_) {
    if (sampler_)
      cached_ = sampler_->indices();
    else if (o_.shuffle)
      cached_ = permutation(dataset_->size(), o_.seed + static_cast<uint64_t>(epoch_));
    else
      cached_ = iota(dataset_->size());
    if (!sampler_ && start_ > 0) cached_.erase(cached_.begin(), cached_.begin() + static_cast<std::ptrdiff_t>(start_));
    cache_valid_ = true;
  }
  return cached_;
}

Batch DataLoader::batch(int64_t i) const {
  const int64_t nb = num_batches();
  if (i < 0 || i >= nb)
    throw Error(PL_ERR_INVALID_ARGUMENT, "DataLoader::batch(" + std::to_string(i) + "): the epoch has " +
                                             std::to_string(nb) + " batches, valid indices are [0, " +
                                             std::to_string(nb) + ")");
  const std::vector<int64_t>& all = indices();
  const size_t begin = static_cast<size_t>(i * o_.batch_size);
  const size_t end = std::min(all.size(), begin + static_cast<size_t>(o_.batch_size));
  return dataset_->get_batch(std::vector<int64_t>(all.begin() + static_cast<std::ptrdiff_t>(begin),
                                                  all.begin() + static_cast<std::ptrdiff_t>(end)));
}

}  // namespace pl
