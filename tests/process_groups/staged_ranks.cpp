// The staged-group ranks of the gloo staging tests (see staged_ranks.hpp).
#include "staged_ranks.hpp"

#include <stdexcept>
#include <thread>

namespace staged {

namespace {

// The cuda accelerator plugin: device memory through its own table.
class CudaDevice : public RankDevice {
 public:
  CudaDevice(pl::Runtime& rt, size_t arena_bytes) : accel_(rt, "cuda") {
    api = accel_.api();
    acc = accel_.get();
    accel_.set_device(0);
    arena_ = static_cast<uint8_t*>(accel_.alloc(device, arena_bytes));
    size_ = arena_bytes;
  }
  ~CudaDevice() override { accel_.free(device, arena_); }
  void upload(void* dev, const void* host, size_t bytes) override {
    accel_.copy(dev, device, host, {PL_DEVICE_CPU, 0}, bytes);
    accel_.synchronize();
  }
  void download(void* host, const void* dev, size_t bytes) override {
    accel_.copy(host, {PL_DEVICE_CPU, 0}, dev, device, bytes);
    accel_.synchronize();
  }

 private:
  pl::Accelerator accel_;
};

// The emulated device: the test reads and writes its memory directly.
class EmulatedDevice : public RankDevice {
 public:
  EmulatedDevice(emulated::Device& d, const PL_Host* host, size_t arena_bytes) : dev_(d) {
    api = emulated::Device::api();
    acc = d.instance(host);
    arena_ = static_cast<uint8_t*>(d.alloc(0, arena_bytes));
    size_ = arena_bytes;
  }
  void upload(void* dev, const void* host, size_t bytes) override { dev_.write(dev, host, bytes); }
  void download(void* host, const void* dev, size_t bytes) override { dev_.read(host, dev, bytes); }

 private:
  emulated::Device& dev_;
};

}  // namespace

std::string cuda_unavailable() {
  try {
    pl::Runtime rt(gloo_threads::runtime_options());
    pl::Accelerator a(rt, "cuda");
    if (a.device_count() == 0) return "no GPU: the cuda accelerator says: " + a.unavailable_reason();
    return "";
  } catch (const std::exception& e) {
    return std::string("the cuda accelerator plugin is not available here: ") + e.what();
  }
}

void* RankDevice::alloc(size_t bytes) {
  const size_t at = (used_ + 255) / 256 * 256;
  if (at + bytes > size_)
    throw std::runtime_error("test arena of " + std::to_string(size_) + " bytes is too small for " +
                             std::to_string(bytes) + " more");
  used_ = at + bytes;
  return arena_ + at;
}

std::unique_ptr<RankDevice> make_device(Kind kind, pl::Runtime& rt, emulated::Device* emu, size_t arena_bytes) {
  if (kind == Kind::kCuda) return std::make_unique<CudaDevice>(rt, arena_bytes);
  if (emu == nullptr) throw std::invalid_argument("the emulated kind needs an emulated::Device");
  return std::make_unique<EmulatedDevice>(*emu, rt.host(), arena_bytes);
}

Group::Group(const pl::Runtime& rt, const pl::Store& store, int rank, int world, PL_Device device,
             const PL_AcceleratorApi* acc_api, PL_Accelerator* acc, const std::string& name,
             std::chrono::milliseconds timeout)
    : host_(rt.host()) {
  api_ = rt.find(PL_PLUGIN_PROCESS_GROUP, "gloo").api<PL_ProcessGroupApi>();
  PL_ProcessGroupConfig c{};
  c.struct_size = sizeof c;
  c.rank = rank;
  c.world_size = world;
  c.store = store.get();
  c.group_name = name.c_str();
  c.timeout_ms = timeout.count();
  c.device = device;
  c.accelerator_api = acc_api;
  c.accelerator = acc;
  c.options = {sizeof(PL_OptionList), nullptr, 0};
  pl::check(host_, api_->create(host_, &c, &pg_));
}

Group::~Group() {
  if (pg_) api_->destroy(pg_);
}

void Job::run(const std::function<void(Rank&)>& body, size_t arena_bytes, const std::string& group) {
  const int world = job_.world();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        pl::Runtime rt(gloo_threads::runtime_options());
        pl::Store store(rt, client_options());
        auto dev = make_device(kind_, rt, emu_, arena_bytes);
        Group pg(rt, store, r, world, dev->device, dev->api, dev->acc, group, 30s);
        Rank ctx{r, world, &rt, &store, dev.get(), &pg};
        body(ctx);
      } catch (const pl::Error& e) {
        ADD_FAILURE() << "rank " << r << ": pl::Error " << e.code() << ": " << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace staged
