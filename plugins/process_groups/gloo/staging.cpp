// Staging device buffers through page-locked host memory (see staging.hpp): the config checks, the
// pinned-block pool and one op's copy plan.
#include "staging.hpp"

#include <algorithm>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

using plugin::fail;

namespace {

constexpr size_t kGrain = 64 * 1024;  // pinned blocks grow in steps of this: few regrowths
constexpr uintptr_t kAlign = 64;      // host views keep their device address modulo this

// What zero-element device tensors point at once staged: a valid host address that no one writes.
alignas(64) const uint8_t kNothing[64] = {};

}  // namespace

std::string device_type_text(PL_DeviceType t) {
  if (t == PL_DEVICE_CPU) return "cpu";
  if (t == PL_DEVICE_CUDA) return "cuda";
  return "device type " + std::to_string(t);
}

std::string device_text(PL_Device d) { return device_type_text(d.type) + ":" + std::to_string(d.index); }

pg::TensorCheck tensor_rule(const PL_ProcessGroup& pg, const std::string& where) {
  const Staging* s = pg.staging.get();  // the rule is used within the call, while the group lives
  return [s, where](const PL_Tensor* t, const char* what) {
    const bool readable = t && t->struct_size >= PL_STRUCT_SIZE(PL_Tensor, shape);
    if (readable && (t->device.type == PL_DEVICE_CPU || (s && s->accepts(t->device))))
      return pg::check_tensor_arg(t, where, what, t->device.type, "");
    // A bad descriptor is named by check_tensor_arg's own checks; a good one on another device by the rule.
    const std::string rule =
        s ? "this gloo group takes CPU tensors and tensors on " + s->device_name() +
                ", the device it was created for (it stages them through host memory)"
          : std::string(
                "this gloo group takes CPU tensors only (it was created for the cpu): to pass device "
                "tensors, create it for their device with an accelerator, which stages them through host "
                "memory, or use nccl");
    pg::check_tensor_arg(t, where, what, PL_DEVICE_CPU, rule.c_str());
  };
}

// ---- PinnedPool ------------------------------------------------------------------------------------

PinnedPool::Block PinnedPool::acquire(size_t bytes) {
  Block too_small;
  {
    std::lock_guard<std::mutex> g(m_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if (it->capacity >= bytes && (best == idle_.end() || it->capacity < best->capacity)) best = it;
    if (best != idle_.end()) {
      Block b = *best;
      idle_.erase(best);
      return b;
    }
    if (!idle_.empty()) {  // none fits: replace the largest idle block by a bigger one
      auto largest = std::max_element(idle_.begin(), idle_.end(),
                                      [](const Block& a, const Block& b) { return a.capacity < b.capacity; });
      too_small = *largest;
      idle_.erase(largest);
    }
  }
  if (too_small.ptr) free_block(too_small);  // outside the lock: freeing pinned memory is slow
  Block b;
  b.capacity = (std::max<size_t>(bytes, 1) + kGrain - 1) / kGrain * kGrain;
  void* p = nullptr;
  if (PL_Error* e = api_->alloc_host(acc_, b.capacity, &p)) {
    const std::string msg = host_->error_message(e);
    const PL_ErrorCode code = host_->error_code(e);
    host_->error_destroy(e);
    fail(code, "page-locked host memory of " + std::to_string(b.capacity) + " bytes to stage " + device_ +
                   " buffers: alloc_host failed: " + msg);
  }
  if (p == nullptr)
    fail(PL_ERR_RESOURCE, "alloc_host of " + std::to_string(b.capacity) + " bytes returned NULL without an error");
  b.ptr = static_cast<uint8_t*>(p);
  size_t n = 0;
  {
    std::lock_guard<std::mutex> g(m_);
    n = ++allocated_;
  }
  plugin::logf(host_, PL_LOG_DEBUG, "gloo", "staging %s: page-locked block %zu of %zu bytes%s", device_.c_str(), n,
               b.capacity, too_small.ptr ? " (replacing a smaller one)" : "");
  return b;
}

void PinnedPool::release(Block b) noexcept {
  if (b.ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> g(m_);
    if (!closed_) {
      try {
        idle_.push_back(b);
        return;
      } catch (...) {  // no memory for the list: free the block instead
      }
    }
  }
  free_block(b);
}

void PinnedPool::free_all() noexcept {
  std::vector<Block> blocks;
  {
    std::lock_guard<std::mutex> g(m_);
    closed_ = true;
    blocks.swap(idle_);
  }
  for (const Block& b : blocks) free_block(b);
}

size_t PinnedPool::blocks_allocated() const {
  std::lock_guard<std::mutex> g(m_);
  return allocated_;
}

void PinnedPool::free_block(const Block& b) noexcept {
  if (PL_Error* e = api_->free_host(acc_, b.ptr)) {
    plugin::logf(host_, PL_LOG_WARN, "gloo", "staging %s: free_host of a %zu-byte block failed: %s", device_.c_str(),
                 b.capacity, host_->error_message(e));
    host_->error_destroy(e);
  }
}

// ---- Staging ---------------------------------------------------------------------------------------

std::shared_ptr<Staging> Staging::create(const PL_Host* host, const PL_ProcessGroupConfig& c) {
  const PL_Device dev = c.device;
  if (dev.type == PL_DEVICE_CPU) return nullptr;  // host tensors only: nothing to stage
  const std::string name = device_text(dev);
  if (dev.index < 0)
    fail(PL_ERR_INVALID_ARGUMENT, "gloo: config->device " + name + " is not valid: device indices start at 0");
  const PL_AcceleratorApi* api = c.accelerator_api;
  if (api == nullptr || c.accelerator == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         "gloo: config->device is " + name + ", but no accelerator was given (config->" +
             (api == nullptr ? "accelerator_api" : "accelerator") +
             " is NULL): the gloo process group moves host memory only and needs the accelerator that owns " + name +
             " to stage its buffers through page-locked host memory; pass config->accelerator_api and "
             "config->accelerator (the ddp strategy passes its own), or create the group for the cpu");
  if (api->struct_size < PL_ACCELERATOR_API_MIN_SIZE)
    fail(PL_ERR_VERSION, "gloo: the accelerator's table (struct_size " + std::to_string(api->struct_size) +
                             ") is smaller than the v1 minimum " + std::to_string(PL_ACCELERATOR_API_MIN_SIZE));
  if (api->device_type != dev.type)
    fail(PL_ERR_INVALID_ARGUMENT, "gloo: config->device is " + name + ", but the accelerator given drives " +
                                      device_type_text(api->device_type) + " devices: pass the accelerator that owns " +
                                      name);
  const bool sync = (api->flags & PL_ACCEL_SYNCHRONOUS) != 0;
  if (!PL_HAS_FIELD(PL_AcceleratorApi, api, copy) || api->alloc_host == nullptr || api->free_host == nullptr ||
      api->copy == nullptr ||
      (!sync && (!PL_HAS_FIELD(PL_AcceleratorApi, api, stream_synchronize) || api->stream_synchronize == nullptr)))
    fail(PL_ERR_UNSUPPORTED, "gloo: the accelerator for " + name +
                                 " lacks an entry that staging needs (alloc_host, free_host, copy" +
                                 (sync ? "" : ", stream_synchronize") + ")");
  PL_DeviceAvailability avail{};
  avail.struct_size = sizeof avail;
  if (PL_Error* e = api->availability(c.accelerator, &avail)) {
    const std::string msg = host->error_message(e);
    const PL_ErrorCode code = host->error_code(e);
    host->error_destroy(e);
    fail(code, "gloo: config->device is " + name + ": asking the accelerator for its devices failed: " + msg);
  }
  avail.reason[sizeof avail.reason - 1] = '\0';
  if (avail.device_count <= 0)
    fail(PL_ERR_RUNTIME, "gloo: config->device is " + name + ", but the accelerator has no usable device (" +
                             (avail.reason[0] ? avail.reason : "no reason given") + "); create the group for the cpu");
  if (dev.index >= avail.device_count)
    fail(PL_ERR_INVALID_ARGUMENT, "gloo: config->device " + name + " does not exist: the accelerator sees " +
                                      std::to_string(avail.device_count) + " device(s), " + device_text({dev.type, 0}) +
                                      ".." + device_text({dev.type, avail.device_count - 1}));
  return std::make_shared<Staging>(host, api, c.accelerator, dev);
}

Staging::Staging(const PL_Host* host, const PL_AcceleratorApi* api, PL_Accelerator* acc, PL_Device device)
    : host_(host),
      api_(api),
      acc_(acc),
      device_(device),
      name_(device_text(device)),
      synchronous_((api->flags & PL_ACCEL_SYNCHRONOUS) != 0),
      pool_(host, api, acc, name_) {}

void Staging::check(PL_Error* e, const std::string& what) const {
  if (e == nullptr) return;
  const std::string msg = host_->error_message(e);
  const PL_ErrorCode code = host_->error_code(e);
  host_->error_destroy(e);
  fail(code, "staging " + name_ + " through host memory: " + what + " failed: " + msg);
}

void Staging::bind_thread() const {
  check(api_->set_device(acc_, device_.index), "set_device(" + std::to_string(device_.index) + ")");
}

void Staging::copy(void* dst, PL_Device dst_dev, const void* src, PL_Device src_dev, size_t bytes) const {
  check(api_->copy(acc_, dst, dst_dev, src, src_dev, bytes, nullptr),
        "copying " + std::to_string(bytes) + " bytes " + device_text(src_dev) + " -> " + device_text(dst_dev));
}

void Staging::synchronize() const {
  if (!synchronous_) check(api_->stream_synchronize(acc_, nullptr), "synchronising the default stream");
}

// ---- StagedOp --------------------------------------------------------------------------------------

StagedOp::~StagedOp() {
  if (block_.ptr) staging_->pool().release(block_);
}

void StagedOp::add(PL_Tensor* t, Role role) {
  if (t->device.type == PL_DEVICE_CPU) return;     // host memory already
  if (!staging_ || !staging_->accepts(t->device))  // the tensor rule refused these before the op ran
    fail(PL_ERR_INTERNAL, "gloo: a tensor on " + device_text(t->device) + " reached an op of a group that stages " +
                              (staging_ ? staging_->device_name() : std::string("nothing")));
  const size_t bytes = static_cast<size_t>(t->numel) * pl_dtype_size(t->dtype);
  if (bytes == 0) {  // nothing to move; gloo still gets a host address
    t->data = const_cast<uint8_t*>(kNothing);
    t->device = {PL_DEVICE_CPU, 0};
    return;
  }
  const auto begin = reinterpret_cast<uintptr_t>(t->data);
  entries_.push_back({t, begin, begin + bytes, role});
}

namespace {

// Sorts and merges [begin, end) ranges that overlap or touch.
std::vector<std::pair<uintptr_t, uintptr_t>> merged(std::vector<std::pair<uintptr_t, uintptr_t>> r) {
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

}  // namespace

uint8_t* StagedOp::host_of(uintptr_t a) const {
  // The last range that begins at or before `a` (every registered byte lies in one).
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), a, [](uintptr_t v, const Range& r) { return v < r.begin; });
  --it;
  return block_.ptr + it->host_offset + (a - it->begin);
}

void StagedOp::stage_in() {
  if (entries_.empty()) return;
  std::vector<std::pair<uintptr_t, uintptr_t>> all, reads, writes;
  for (const Entry& e : entries_) {
    all.emplace_back(e.begin, e.end);
    if (e.role & kRead) reads.emplace_back(e.begin, e.end);
    if (e.role & kWrite) writes.emplace_back(e.begin, e.end);
  }
  size_t cursor = 0;
  for (const auto& r : merged(std::move(all))) {
    const size_t offset = (cursor + kAlign - 1) / kAlign * kAlign + (r.first % kAlign);
    ranges_.push_back({r.first, r.second, offset});
    cursor = offset + (r.second - r.first);
  }
  writes_ = merged(std::move(writes));
  block_ = staging_->pool().acquire(cursor);

  const PL_Device host{PL_DEVICE_CPU, 0};
  const PL_Device dev = staging_->device();
  staging_->bind_thread();
  const auto in = merged(std::move(reads));
  for (const auto& r : in)
    staging_->copy(host_of(r.first), host, reinterpret_cast<const void*>(r.first), dev, r.second - r.first);
  if (!in.empty()) staging_->synchronize();  // the host copies are complete before gloo reads them
  for (const Entry& e : entries_) {
    e.t->data = host_of(e.begin);
    e.t->device = host;
  }
}

void StagedOp::stage_out() {
  if (writes_.empty()) return;
  const PL_Device host{PL_DEVICE_CPU, 0};
  const PL_Device dev = staging_->device();
  staging_->bind_thread();  // perhaps another thread than stage_in's (a recv's finisher)
  for (const auto& r : writes_)
    staging_->copy(reinterpret_cast<void*>(r.first), dev, host_of(r.first), host, r.second - r.first);
  staging_->synchronize();  // the device holds the results before the op completes
}

}  // namespace plrt::gloo_pg
