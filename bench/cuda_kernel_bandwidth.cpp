// cuda_kernel_bandwidth: the cuda accelerator's fused kernels, called through the SDK as a program
// calls them, against cudaMemcpyAsync device-to-device moving the same number of bytes, in the
// same run on the same stream.  Achieved bandwidth = (bytes read + bytes written) / time, each
// side timed with CUDA events over --iters back-to-back calls after --warmup calls, best of --reps.
// The kernels are memory-bound; the target is a ratio of at least 0.85 to the copy.  pack/unpack
// (ABI 1.4) copy a 64-tensor bucket into its flat buffer and back in one launch each.
//
// Without a GPU it says why and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/runtime.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Options {
  double mib = 64;       // per f32 operand
  int iters = 50;        // timed calls per repetition
  int warmup = 5;        // untimed calls first
  int reps = 3;          // repetitions; the best is reported
  int64_t chunk = 2048;  // quantize_u8 / dequantize_u8 chunk size
  int device = 0;
};

[[noreturn]] void usage(const char* why) {
  if (why) std::fprintf(stderr, "cuda_kernel_bandwidth: %s\n", why);
  std::fprintf(stderr,
               "usage: cuda_kernel_bandwidth [--mib N] [--iters N] [--warmup N] [--reps N] [--chunk N] [--device N]\n"
               "  --mib     MiB per float32 operand (default 64)\n"
               "  --iters   timed calls per repetition (default 50)\n"
               "  --warmup  untimed calls before timing (default 5)\n"
               "  --reps    repetitions, best reported (default 3)\n"
               "  --chunk   quantize_u8/dequantize_u8 chunk size in elements (default 2048)\n"
               "  --device  CUDA device index (default 0)\n");
  std::exit(why ? 2 : 0);
}

double number(const char* flag, const char* v, double lo, const char* lo_text) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(x >= lo))
    usage((std::string(flag) + " '" + v + "' is invalid; it must be a number >= " + lo_text).c_str());
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage(nullptr);
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--mib")
      o.mib = number("--mib", v, 0.001, "0.001");
    else if (a == "--iters")
      o.iters = static_cast<int>(number("--iters", v, 1, "1"));
    else if (a == "--warmup")
      o.warmup = static_cast<int>(number("--warmup", v, 0, "0"));
    else if (a == "--reps")
      o.reps = static_cast<int>(number("--reps", v, 1, "1"));
    else if (a == "--chunk")
      o.chunk = static_cast<int64_t>(number("--chunk", v, 1, "1"));
    else if (a == "--device")
      o.device = static_cast<int>(number("--device", v, 0, "0"));
    else
      usage(("unknown option " + a).c_str());
  }
  return o;
}

void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}

PL_Tensor tensor(void* data, PL_DType dtype, int64_t n) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device = {PL_DEVICE_CUDA, 0};
  t.numel = n;
  t.ndim = 1;
  t.shape[0] = n;
  return t;
}

struct Kernel {
  std::string name;
  double bytes_read, bytes_written;
  std::function<PL_Error*()> call;
};

// Mean seconds per call of `fn` over opt.iters calls on `stream`, best of opt.reps.
double time_calls(const Options& opt, cudaStream_t stream, const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < opt.warmup; ++i) fn();
  double best = 1e30;
  for (int r = 0; r < opt.reps; ++r) {
    cuda_check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < opt.iters; ++i) fn();
    cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    best = std::min(best, ms * 1e-3 / opt.iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

int run(const Options& opt) {
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};  // this build's plugin first; then the usual search
  ro.log_level = "warn";
  pl::Runtime rt(ro);
  pl::Accelerator acc(rt, "cuda");
  const int count = acc.device_count();
  if (count == 0) {
    std::printf("cuda_kernel_bandwidth: no GPU to measure: %s\n", acc.unavailable_reason().c_str());
    return 0;
  }
  if (opt.device >= count)
    usage(("--device " + std::to_string(opt.device) + " is out of range; this process sees " + std::to_string(count) +
           " CUDA device(s)")
              .c_str());
  acc.set_device(opt.device);
  cuda_check(cudaSetDevice(opt.device), "cudaSetDevice");
  const PL_DeviceInfo info = acc.device_info(opt.device);
  const PL_AcceleratorApi* api = acc.api();
  PL_Accelerator* a = acc.get();
  const PL_Host* host = acc.host();

  const auto n = static_cast<int64_t>(opt.mib * 1024 * 1024 / 4);
  const int64_t chunks = n / opt.chunk + (n % opt.chunk != 0);
  const PL_Device dev{PL_DEVICE_CUDA, opt.device};
  std::vector<void*> owned;
  auto alloc = [&](size_t bytes) {
    void* p = acc.alloc(dev, bytes);
    owned.push_back(p);
    return p;
  };
  const size_t f32_bytes = static_cast<size_t>(n) * 4;
  void* p = alloc(f32_bytes);  // param / the source of fill, scale, cast, quantize
  void* g = alloc(f32_bytes);
  void* m = alloc(f32_bytes);
  void* v = alloc(f32_bytes);
  void* half = alloc(f32_bytes / 2);
  void* q = alloc(static_cast<size_t>(n));
  void* minmax = alloc(static_cast<size_t>(chunks) * 8);
  void* flag = alloc(4);

  // Finite random data (quantisation needs it), copied once.
  std::vector<float> h(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : h) x = u(rng);
  for (void* dst : {p, g, m}) acc.copy(dst, dev, h.data(), {PL_DEVICE_CPU, 0}, f32_bytes);
  for (auto& x : h) x = x * x;  // exp_avg_sq >= 0
  acc.copy(v, dev, h.data(), {PL_DEVICE_CPU, 0}, f32_bytes);
  cuda_check(cudaMemset(flag, 0, 4), "cudaMemset");

  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto* s = reinterpret_cast<PL_Stream*>(stream);
  PL_Tensor tp = tensor(p, PL_F32, n), tg = tensor(g, PL_F32, n), tm = tensor(m, PL_F32, n), tv = tensor(v, PL_F32, n);
  PL_Tensor tbf = tensor(half, PL_BF16, n), tf16 = tensor(half, PL_F16, n), tq = tensor(q, PL_U8, n);
  PL_Tensor tmm = tensor(minmax, PL_F32, 2 * chunks), tflag = tensor(flag, PL_F32, 1);
  for (PL_Tensor* t : {&tp, &tg, &tm, &tv, &tbf, &tf16, &tq, &tmm, &tflag}) t->device.index = opt.device;
  const PL_SgdParams sgd{sizeof(PL_SgdParams), 1e-6, 0.9, 0.0, 0.0, 0, 0};
  const PL_AdamParams adam{sizeof(PL_AdamParams), 1e-6, 0.9, 0.999, 1e-8, 0.0, 10, 0, 0, 0};
  const double N = static_cast<double>(n), mm_bytes = static_cast<double>(chunks) * 8;
  // A gradient bucket: `g` as kParts tensors of about equal size, packed into `m` and back (the
  // gradient-sync core's one pack / unpack launch per bucket).
  constexpr int kParts = 64;
  std::vector<PL_Tensor> parts;
  std::vector<int64_t> offsets;
  for (int i = 0; i < kParts; ++i) {
    const int64_t b = n * i / kParts, e = n * (i + 1) / kParts;
    parts.push_back(tensor(static_cast<float*>(g) + b, PL_F32, e - b));
    parts.back().device.index = opt.device;
    offsets.push_back(b);
  }

  const std::vector<Kernel> kernels = {
      {"fill f32", 0, 4 * N, [&] { return api->fill(a, &tm, 0.5, s); }},
      {"scale f32", 4 * N, 4 * N, [&] { return api->scale(a, &tm, 1.0, s); }},
      {"axpy f32", 8 * N, 4 * N, [&] { return api->axpy(a, &tm, 1e-3, &tg, s); }},
      {"cast f32->bf16", 4 * N, 2 * N, [&] { return api->cast(a, &tbf, &tp, s); }},
      {"cast f32->f16", 4 * N, 2 * N, [&] { return api->cast(a, &tf16, &tp, s); }},
      {"sgd_step f32 momentum", 12 * N, 8 * N, [&] { return api->sgd_step(a, &tp, &tg, &tm, &sgd, s); }},
      {"adam_step f32", 16 * N, 12 * N, [&] { return api->adam_step(a, &tp, &tg, &tm, &tv, &adam, s); }},
      {"quantize_u8 f32", 4 * N, N + mm_bytes, [&] { return api->quantize_u8(a, &tg, &tq, &tmm, opt.chunk, s); }},
      {"dequantize_u8 f32", N + mm_bytes, 4 * N, [&] { return api->dequantize_u8(a, &tq, &tmm, &tm, opt.chunk, s); }},
      {"unscale_check f32", 4 * N, 4 * N, [&] { return api->unscale_check(a, &tg, 1.0, &tflag, s); }},
      {"pack 64 parts f32", 4 * N, 4 * N,
       [&] { return api->pack(a, parts.data(), parts.size(), offsets.data(), &tm, s); }},
      {"unpack 64 parts f32", 4 * N, 4 * N,
       [&] { return api->unpack(a, &tm, offsets.data(), parts.data(), parts.size(), s); }},
  };

  // The reference copy moves what each kernel moves, half read and half written: its buffers hold
  // the largest half (adam_step's 28 N bytes: 14 N; they held 8 N once, and the sgd_step row failed
  // with cudaErrorInvalidValue).
  double largest = 0;
  for (const Kernel& k : kernels) largest = std::max(largest, (k.bytes_read + k.bytes_written) / 2);
  void* copy_src = alloc(static_cast<size_t>(largest) + 1);
  void* copy_dst = alloc(static_cast<size_t>(largest) + 1);

  std::printf("# cuda_kernel_bandwidth on %s (compute capability %d.%d), device %d\n", info.name, info.compute_major,
              info.compute_minor, opt.device);
  std::printf("# %lld float32 elements (%.1f MiB per operand), %d calls x best of %d, quantize chunk %lld\n",
              static_cast<long long>(n), opt.mib, opt.iters, opt.reps, static_cast<long long>(opt.chunk));
  std::printf("# %-22s %10s | %10s %9s | %10s %9s | %6s\n", "kernel", "moved", "kernel", "GB/s", "memcpy", "GB/s",
              "ratio");
  std::printf("# %-22s %10s | %10s %9s | %10s %9s | %6s\n", "", "(MiB)", "(us)", "", "(us)", "", "");
  double worst = 1e30;
  std::string worst_name;
  for (const Kernel& k : kernels) {
    const double moved = k.bytes_read + k.bytes_written;
    const double t_kernel = time_calls(opt, stream, [&] { pl::check(host, k.call()); });
    // The copy moves the same bytes: it reads `bytes` and writes `bytes`.
    const auto bytes = static_cast<size_t>(moved / 2);
    const double t_copy = time_calls(opt, stream, [&] {
      cuda_check(cudaMemcpyAsync(copy_dst, copy_src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    });
    const double bw_kernel = moved / t_kernel * 1e-9, bw_copy = 2.0 * static_cast<double>(bytes) / t_copy * 1e-9;
    const double ratio = bw_kernel / bw_copy;
    if (ratio < worst) {
      worst = ratio;
      worst_name = k.name;
    }
    std::printf("  %-22s %10.1f | %10.2f %9.1f | %10.2f %9.1f | %6.3f\n", k.name.c_str(), moved / (1 << 20),
                t_kernel * 1e6, bw_kernel, t_copy * 1e6, bw_copy, ratio);
  }
  // Reports any error a kernel found in its data (none expected: the data is finite).
  pl::check(host, api->stream_synchronize(a, s));
  std::printf("# lowest ratio: %.3f (%s); target >= 0.85\n", worst, worst_name.c_str());
  cudaStreamDestroy(stream);
  for (void* ptr : owned) acc.free(dev, ptr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernel_bandwidth: %s\n", e.what());
    return 1;
  }
}
