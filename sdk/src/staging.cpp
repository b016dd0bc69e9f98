// pl::StagingLoader: a producer thread that builds batches and, on an asynchronous device, stages
// them through page-locked memory onto a copy stream; a ring of device slots reused under events.
//
// Ownership of a slot moves between the threads under the mutex: the producer owns the slots in
// `free_slots`, the consumer owns the slot of every queued item and the one it handed out last
// (`current`).  Only the owner touches a slot's fields.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <plrt/sdk/staging.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pl {

namespace {

constexpr PL_Device kHost{PL_DEVICE_CPU, 0};
constexpr size_t kStagingAlign = 256;  // each field's offset in the staging buffer

size_t align_up(size_t n) { return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign; }

std::string device_text(PL_Device d) {
  const char* type = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : "device type";
  return std::string(type) + ":" + std::to_string(d.index);
}

// True when a tensor of `b` is shared beyond the slot's own reference.
bool held_elsewhere(const Batch& b) {
  return std::any_of(b.begin(), b.end(), [](const Tensor& t) { return t.defined() && t.use_count() > 1; });
}

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.defined() && a.dtype() == b.dtype() && a.shape() == b.shape();
}

}  // namespace

// The State's parts, in a named namespace: a type with internal linkage in a member of the
// (external) StagingLoader::State is what gcc's -Wsubobject-linkage warns of in a unity build.
namespace staging_detail {

struct Slot {
  Batch device;            // this slot's device tensors, kept for reuse
  void* pinned = nullptr;  // page-locked staging memory
  size_t pinned_bytes = 0;
  PL_Event* copied = nullptr;    // on the copy stream, after this slot's copies
  PL_Event* released = nullptr;  // on the default stream, when the consumer moved past the slot
  bool copy_recorded = false;    // `copied` was recorded: the pinned memory may still be read
  bool release_pending = false;  // `released` recorded; the copy stream has not waited for it yet
  bool escaped = false;          // the user kept its tensors: the next batch gets fresh buffers
};

struct Item {
  int64_t index = 0;
  int slot = -1;  // staged mode only
  Batch batch;
  std::exception_ptr error;
};

}  // namespace staging_detail

using staging_detail::Item;
using staging_detail::Slot;

struct StagingLoader::State {
  DataLoader& loader;
  Accelerator acc;
  PL_Device device;
  int depth;
  bool staged;

  std::mutex mu;
  std::condition_variable room;      // the producer waits for a free slot / queue space
  std::condition_variable has_item;  // the consumer waits for a batch or the end
  std::deque<Item> ready;
  std::vector<int> free_slots;
  bool stopping = false, producer_done = false, running = false;
  std::exception_ptr failed;  // rethrown by every next() after the thread's error
  std::thread thread;
  int current = -1;  // the slot handed out by the last next()

  PL_Stream* copy_stream = nullptr;
  std::vector<Slot> slots;  // depth + 1 in staged mode

  State(DataLoader& l, Accelerator a, PL_Device d, int n) : loader(l), acc(std::move(a)), device(d), depth(n) {
    staged = acc.defined() && !acc.synchronous() && device.type != PL_DEVICE_CPU;
  }
  ~State() { free_resources(); }

  void produce(int64_t first, int64_t end);
  Batch stage(Slot& s, const Batch& host);
  Batch to_device(Batch host) const;
  void release(int slot);
  void warn(const std::string& msg) const noexcept;
  void free_resources() noexcept;
};

void StagingLoader::State::warn(const std::string& msg) const noexcept {
  if (acc.defined()) acc.host()->log(acc.host()->ctx, PL_LOG_WARN, "sdk", msg.c_str());
}

void StagingLoader::State::produce(int64_t first, int64_t end) {
  std::exception_ptr setup_error;
  if (staged) {
    try {
      acc.set_device(device.index);  // the copy stream's device, for this thread's calls
    } catch (...) {
      setup_error = std::current_exception();
    }
  }
  for (int64_t b = first; b < end; ++b) {
    Item it;
    it.index = b;
    {
      std::unique_lock<std::mutex> lk(mu);
      room.wait(lk,
                [&] { return stopping || (staged ? !free_slots.empty() : static_cast<int>(ready.size()) < depth); });
      if (stopping) return;
      if (staged) {
        it.slot = free_slots.back();
        free_slots.pop_back();
      }
    }
    try {
      if (setup_error) std::rethrow_exception(setup_error);
      Batch host = loader.batch(b);
      it.batch = staged ? stage(slots[static_cast<size_t>(it.slot)], host) : std::move(host);
    } catch (...) {
      it.error = std::current_exception();
    }
    const bool failed_here = it.error != nullptr;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stopping) {
        if (it.slot >= 0) free_slots.push_back(it.slot);
        return;
      }
      ready.push_back(std::move(it));
    }
    has_item.notify_one();
    if (failed_here) break;  // the consumer rethrows it; nothing after it is built
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    producer_done = true;
  }
  has_item.notify_all();
}

// Host batch -> this slot's pinned memory -> its device tensors, on the copy stream.
Batch StagingLoader::State::stage(Slot& s, const Batch& host) {
  if (s.escaped) {  // the user still holds the old tensors: leave them to the user
    s.device.clear();
    s.escaped = false;
    s.release_pending = false;
  }
  std::vector<size_t> offset(host.size());
  size_t total = 0;
  for (size_t f = 0; f < host.size(); ++f) {
    if (!host[f].defined() || !host[f].is_host())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "StagingLoader: field " + std::to_string(f) + " of the dataset's batch is not a host tensor");
    offset[f] = total;
    total += align_up(host[f].nbytes());
  }
  // The previous copy out of the pinned memory must be done before it is rewritten.
  if (s.copy_recorded) acc.event_synchronize(s.copied);
  if (s.pinned_bytes < total) {
    acc.free_host(s.pinned);
    s.pinned = nullptr;
    s.pinned_bytes = 0;
    s.pinned = acc.alloc_host(total);
    s.pinned_bytes = total;
  }
  char* pinned = static_cast<char*>(s.pinned);
  for (size_t f = 0; f < host.size(); ++f)
    if (host[f].nbytes() > 0) std::memcpy(pinned + offset[f], host[f].data(), host[f].nbytes());

  Batch dev(host.size());
  bool dropping = s.device.size() > host.size();
  for (size_t f = 0; f < host.size(); ++f) {
    const bool reuse = f < s.device.size() && same_layout(s.device[f], host[f]) && s.device[f].use_count() == 1;
    if (reuse) {
      dev[f] = s.device[f];
    } else {
      dropping = dropping || (f < s.device.size() && s.device[f].defined());
      dev[f] = Tensor::empty(acc, device, host[f].shape(), host[f].dtype());
    }
  }
  if (s.release_pending) {
    // Kernels queued before the consumer moved on may still read the old buffers: the copies wait
    // for them on the device; buffers about to be freed wait for them here.
    acc.stream_wait_event(copy_stream, s.released);
    if (dropping) acc.event_synchronize(s.released);
    s.release_pending = false;
  }
  for (size_t f = 0; f < host.size(); ++f)
    if (host[f].nbytes() > 0)
      acc.copy_async(dev[f].data(), device, pinned + offset[f], kHost, host[f].nbytes(), copy_stream);
  acc.event_record(s.copied, copy_stream);
  s.copy_recorded = true;
  s.device = dev;
  return dev;
}

// Unstaged mode: host batches as they are for the host, else copied (synchronously) to the device.
Batch StagingLoader::State::to_device(Batch host) const {
  if (device.type == PL_DEVICE_CPU || !acc.defined()) return host;
  for (Tensor& t : host) t = t.to(acc, device);
  return host;
}

// The consumer moves past `slot` (the one it handed out last): a slot the user still holds is
// marked for fresh buffers; otherwise an event on the default stream marks the end of the user's
// work on it.  The check comes first, so every kernel the user queued on it precedes the event.
// The slot goes back to the producer either way.
void StagingLoader::State::release(int slot) {
  if (slot < 0) return;
  Slot& s = slots[static_cast<size_t>(slot)];
  std::exception_ptr error;
  if (held_elsewhere(s.device)) {
    s.escaped = true;
  } else {
    try {
      acc.event_record(s.released, nullptr);
      s.release_pending = true;
    } catch (...) {
      s.escaped = true;  // no event: never overwrite these buffers
      error = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    free_slots.push_back(slot);
  }
  room.notify_one();
  if (error) std::rethrow_exception(error);
}

void StagingLoader::State::free_resources() noexcept {
  for (Slot& s : slots) {
    try {
      if (s.release_pending) acc.event_synchronize(s.released);  // the user's kernels on the buffers
    } catch (const std::exception& e) {
      warn(std::string("StagingLoader: waiting for a batch's kernels failed: ") + e.what());
    }
    s.device.clear();
    acc.free_host(s.pinned);
    acc.event_destroy(s.copied);
    acc.event_destroy(s.released);
  }
  slots.clear();
  acc.stream_destroy(copy_stream);
  copy_stream = nullptr;
}

// ---- the public face ----

StagingLoader::StagingLoader(DataLoader& loader, Accelerator acc, PL_Device device, int depth) {
  if (depth < 1)
    throw Error(PL_ERR_INVALID_ARGUMENT, "StagingLoader: depth " + std::to_string(depth) +
                                             " is invalid; it must be >= 1 (the number of batches prepared ahead)");
  if (device.type != PL_DEVICE_CPU && (!acc.defined() || acc.device_type() != device.type))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "StagingLoader: device " + device_text(device) + " is not a device of " +
                    (acc.defined() ? "accelerator '" + acc.name() + "'" : "an empty accelerator") +
                    "; pass the accelerator that owns it, or a cpu device");
  s_ = std::make_unique<State>(loader, std::move(acc), device, depth);
  if (s_->staged) {  // on failure ~State frees what was made
    s_->copy_stream = s_->acc.stream_create(device);
    s_->slots.resize(static_cast<size_t>(depth) + 1);
    for (Slot& s : s_->slots) {
      s.copied = s_->acc.event_create(device);
      s.released = s_->acc.event_create(device);
    }
  }
}

StagingLoader::~StagingLoader() { stop(); }

int64_t StagingLoader::num_batches() const { return s_->loader.num_batches(); }
int StagingLoader::depth() const { return s_->depth; }
bool StagingLoader::staged() const { return s_->staged; }

void StagingLoader::start(int64_t first_batch) {
  stop();
  State& s = *s_;
  const int64_t nb = s.loader.num_batches();
  if (first_batch < 0 || first_batch > nb)
    throw Error(PL_ERR_INVALID_ARGUMENT, "StagingLoader::start: first_batch " + std::to_string(first_batch) +
                                             " is outside [0, " + std::to_string(nb) + "] (the epoch has " +
                                             std::to_string(nb) + " batches)");
  s.loader.indices();  // the loader computes the epoch's order lazily: here, not on the thread
  s.ready.clear();
  s.failed = nullptr;
  s.stopping = false;
  s.producer_done = false;
  s.current = -1;
  s.free_slots.clear();
  for (int i = static_cast<int>(s.slots.size()) - 1; i >= 0; --i) s.free_slots.push_back(i);
  s.running = true;
  s.thread = std::thread([&s, first_batch, nb] { s.produce(first_batch, nb); });
}

bool StagingLoader::next(Batch& out) {
  State& s = *s_;
  if (!s.running) throw Error(PL_ERR_INVALID_ARGUMENT, "StagingLoader::next: no pass is running; call start() first");
  if (s.failed) std::rethrow_exception(s.failed);
  Item it;
  {
    std::unique_lock<std::mutex> lk(s.mu);
    s.has_item.wait(lk, [&] { return !s.ready.empty() || s.producer_done; });
    if (s.ready.empty()) {  // the pass is over
      lk.unlock();
      out.clear();
      const int prev = std::exchange(s.current, -1);
      s.release(prev);
      return false;
    }
    it = std::move(s.ready.front());
    s.ready.pop_front();
  }
  s.room.notify_one();
  try {
    if (it.error) std::rethrow_exception(it.error);
    if (s.staged) s.acc.stream_wait_event(nullptr, s.slots[static_cast<size_t>(it.slot)].copied);
  } catch (...) {
    s.failed = std::current_exception();
    if (it.slot >= 0) {
      std::lock_guard<std::mutex> lk(s.mu);
      s.free_slots.push_back(it.slot);
    }
    out.clear();
    try {
      s.release(std::exchange(s.current, -1));
    } catch (...) {  // the thread's error is the one to report
    }
    throw;
  }
  out = s.staged ? std::move(it.batch) : s.to_device(std::move(it.batch));  // drops the user's previous batch
  const int prev = std::exchange(s.current, it.slot);
  s.release(prev);
  return true;
}

void StagingLoader::stop() {
  State& s = *s_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.stopping = true;
  }
  s.room.notify_all();
  s.has_item.notify_all();
  if (s.thread.joinable()) s.thread.join();
  if (!s.running) return;
  s.running = false;
  s.failed = nullptr;
  for (Item& it : s.ready)
    if (it.slot >= 0) s.free_slots.push_back(it.slot);
  s.ready.clear();
  try {
    s.release(std::exchange(s.current, -1));
    if (s.staged) s.acc.stream_synchronize(s.copy_stream);  // copies in flight finish before reuse or free
  } catch (const std::exception& e) {
    s.warn(std::string("StagingLoader::stop: ") + e.what());
  }
}

}  // namespace pl
