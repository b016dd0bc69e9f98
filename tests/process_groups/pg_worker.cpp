// pg_worker: one rank of a multi-process process-group test (tests/process_groups/test_pg_multiprocess.cpp
// starts W of them).  Reads the torchrun-style environment (pl::DistEnv), connects to the store (the
// test serves it: PL_USE_AGENT_STORE=1; otherwise rank 0 serves), creates a pl::ProcessGroup and runs
// one scenario, printing one line per failed check and exiting non-zero on any failure.
//
//   pg_worker matrix   [--sizes 0,1,7,1048576,64MiB] [--ops ...] [--dtypes ...] [--reduce-ops ...] [--roots all|ends]
//   pg_worker missing  [--mode sleep|exit]   rank W-1 never calls; the others must time out naming it
//   pg_worker mismatch --variant op|size|dtype   ranks call different things at one sequence number
//   pg_worker token    [--intruder]          --intruder: this process has a wrong PL_JOB_TOKEN
//   pg_worker gpus                           prints the number of CUDA devices
// Common: --backend gloo|nccl|<path>  --device cpu|cuda  --group NAME  --timeout-ms N  --store-timeout-ms N
// Exit codes: 0 passed, 1 a check failed, 2 bad usage or setup, 3 an unexpected error.
#include "pg_worker.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <plrt/sdk/process_group.hpp>
#include <regex>
#include <sstream>
#include <thread>

#ifdef PLRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace pgtest {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long long Options::get_int(const std::string& name, long long fallback) const {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end) throw std::invalid_argument("--" + name + " '" + it->second + "' is not an integer");
  return v;
}

std::string Ctx::tag() const { return "[rank " + std::to_string(rank()) + "/" + std::to_string(world()) + "] "; }

void Ctx::make_group(milliseconds timeout) {
  pl::ProcessGroupOptions o;
  o.rank = rank();
  o.world_size = world();
  o.group_name = group;
  o.timeout = timeout;
  o.device = device;
  pg = std::make_unique<pl::ProcessGroup>(*rt, backend, *store, o);
}

Buffer::Buffer(PL_Device device, size_t bytes) : device_(device), bytes_(bytes), host_(std::max<size_t>(bytes, 8)) {
  if (device_.type == PL_DEVICE_CUDA) {
#ifdef PLRT_HAVE_CUDA
    if (cudaSetDevice(device_.index) != cudaSuccess || cudaMalloc(&dev_, host_.size()) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) +
                               " bytes on cuda:" + std::to_string(device_.index) + " failed");
#else
    throw std::runtime_error("--device cuda: pg_worker was built without CUDA");
#endif
  }
}

Buffer::~Buffer() {
#ifdef PLRT_HAVE_CUDA
  if (dev_) cudaFree(dev_);
#endif
}

PL_Tensor Buffer::tensor(PL_DType dtype, int64_t numel, int64_t offset) {
  uint8_t* base = static_cast<uint8_t*>(dev_ ? dev_ : host_.data());
  return pl::tensor_view(base + offset * pl_dtype_size(dtype), dtype, numel, device_);
}

void Buffer::upload() {
#ifdef PLRT_HAVE_CUDA
  if (dev_ && cudaMemcpy(dev_, host_.data(), host_.size(), cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("cudaMemcpy to the device failed");
#endif
}

void Buffer::download() {
#ifdef PLRT_HAVE_CUDA
  if (dev_ && cudaMemcpy(host_.data(), dev_, host_.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("cudaMemcpy from the device failed");
#endif
}

int cuda_device_count() {
#ifdef PLRT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return 0;
#endif
}

namespace {

long long ms_since(Clock::time_point t0) { return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count(); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "rank 2", "ranks [0, 2]", "missing ranks: 1, 2" ... name rank r.
bool names_rank(const std::string& msg, int r) {
  std::regex re("ranks?[^0-9a-zA-Z]{0,4}([0-9]+[^0-9a-zA-Z]{1,3})*" + std::to_string(r) + "([^0-9]|$)",
                std::regex::icase);
  return std::regex_search(msg, re);
}

// Collects the failed checks of one scenario and prints them.
struct Checks {
  const Ctx& ctx;
  int failed = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::cout << ctx.tag() << "FAIL " << what << std::endl;
  }
};

// A first allreduce that must succeed: the group works before the scenario breaks it.
void good_allreduce(Ctx& ctx) {
  std::vector<float> x(4, static_cast<float>(ctx.rank() + 1));
  ctx.pg->allreduce(x, PL_REDUCE_SUM);
  const float want = ctx.world() * (ctx.world() + 1) / 2.0f;
  for (float v : x)
    if (v != want)
      throw std::runtime_error("warm-up allreduce: expected " + std::to_string(want) + " got " + std::to_string(v));
}

int run_missing(Ctx& ctx) {
  const milliseconds timeout(ctx.opt.get_int("timeout-ms", 2000));
  const std::string mode = ctx.opt.get("mode", "sleep");
  ctx.make_group(timeout);
  good_allreduce(ctx);  // #1
  good_allreduce(ctx);  // #2
  const int absent = ctx.world() - 1;
  const std::string done_key = ctx.group + "/missing/done/";
  if (ctx.rank() == absent) {
    std::cout << ctx.tag() << "absent rank: " << (mode == "exit" ? "exiting" : "staying idle")
              << " instead of allreduce #3" << std::endl;
    if (mode == "exit") ::_exit(0);  // as a crash would: no clean shutdown
    // Alive and connected, but never calling: until the others have had their errors.
    std::vector<std::string> keys;
    for (int q = 0; q < absent; ++q) keys.push_back(done_key + std::to_string(q));
    ctx.store->wait(keys, timeout + milliseconds(20000));
    return 0;
  }
  std::vector<float> x(16, 1.0f);
  auto t0 = Clock::now();
  Checks c{ctx};
  try {
    ctx.pg->allreduce(x, PL_REDUCE_SUM);
    c.expect(false, "allreduce #3 succeeded although rank " + std::to_string(absent) + " never called it");
  } catch (const pl::Error& e) {
    const long long took = ms_since(t0);
    const std::string msg = e.what();
    std::cout << ctx.tag() << "error after " << took << " ms (code " << e.code() << "): " << msg << std::endl;
    if (mode == "sleep") {
      c.expect(e.code() == PL_ERR_TIMEOUT, "expected code PL_ERR_TIMEOUT (" + std::to_string(PL_ERR_TIMEOUT) +
                                               "), got " + std::to_string(e.code()));
      c.expect(took >= timeout.count() * 8 / 10, "the error came after " + std::to_string(took) + " ms, before the " +
                                                     std::to_string(timeout.count()) + " ms timeout");
    }
    c.expect(took <= timeout.count() + 15000, "the error came only after " + std::to_string(took) + " ms");
    c.expect(contains(msg, "allreduce"), "the message does not name the operation 'allreduce'");
    c.expect(contains(msg, "#3"), "the message does not name the sequence number '#3'");
    c.expect(names_rank(msg, absent), "the message does not name the missing rank " + std::to_string(absent));
  }
  if (mode == "sleep") ctx.store->set(done_key + std::to_string(ctx.rank()), "1");
  if (c.failed == 0) std::cout << ctx.tag() << "missing: OK" << std::endl;
  return c.failed ? 1 : 0;
}

int run_mismatch(Ctx& ctx) {
  const std::string variant = ctx.opt.get("variant", "op");
  const long long within = ctx.opt.get_int("within-ms", 10000);
  ctx.make_group(milliseconds(ctx.opt.get_int("timeout-ms", 60000)));
  good_allreduce(ctx);  // #1
  const int r = ctx.rank(), W = ctx.world();
  // What each rank calls at #2, and what the message must then name.
  auto dtype_of_rank = [](int q) { return q == 0 ? PL_F32 : q % 2 ? PL_F64 : PL_I32; };
  auto numel_of_rank = [&](int q) -> int64_t { return variant == "size" ? 1000 + 11 * q : 8; };
  std::vector<std::vector<std::string>> must_name;  // each inner list: one of these must appear
  if (variant == "op") {
    must_name = {{"allgather"}, {"allreduce"}};
  } else if (variant == "size") {
    for (int q = 0; q < W; ++q)
      must_name.push_back({std::to_string(numel_of_rank(q)), std::to_string(numel_of_rank(q) * 4)});
  } else if (variant == "dtype") {
    for (int q = 0; q < W; ++q) must_name.push_back({pl_dtype_name(dtype_of_rank(q))});
  } else if (variant == "all_to_all") {  // rank 0 calls all_to_all, the others allreduce
    must_name = {{"all_to_all(float32, "}, {"allreduce"}};
  } else if (variant == "counts") {  // all_to_all, rank 1 expecting 9 elements from rank 0, which sends 8
    must_name = {{"rank 0 sends 8 elements to rank 1"}, {"rank 1 expects 9 elements from rank 0"}};
  } else {
    std::cout << ctx.tag() << "unknown --variant '" << variant << "' (op, size, dtype, all_to_all, counts)"
              << std::endl;
    return 2;
  }
  const PL_DType dt = variant == "dtype" ? dtype_of_rank(r) : PL_F32;
  const int64_t n = numel_of_rank(r);
  std::vector<uint8_t> in(n * pl_dtype_size(dt) + 8, 1), out(W * in.size(), 0);
  PL_Tensor t = pl::tensor_view(in.data(), dt, n);
  std::vector<PL_Tensor> outs;
  for (int q = 0; q < W; ++q) outs.push_back(pl::tensor_view(out.data() + q * in.size(), dt, n));
  Checks c{ctx};
  auto t0 = Clock::now();
  try {
    if (variant == "all_to_all" || variant == "counts") {
      std::vector<int64_t> send(static_cast<size_t>(W), 8), recv(static_cast<size_t>(W), 8);
      if (variant == "counts" && r == 1) recv[0] = 9;
      std::vector<float> a(8 * static_cast<size_t>(W)), b(8 * static_cast<size_t>(W) + 1);
      PL_Tensor ti = pl::tensor_view(a.data(), PL_F32, 8 * W);
      PL_Tensor to = pl::tensor_view(b.data(), PL_F32, 8 * W + (variant == "counts" && r == 1 ? 1 : 0));
      if (variant == "counts")
        ctx.pg->all_to_all(ti, to, send, recv);
      else if (r == 0)
        ctx.pg->all_to_all(ti, to);
      else
        ctx.pg->allreduce(ti, PL_REDUCE_SUM);
    } else if (variant == "op" && r == 0) {
      ctx.pg->allgather(t, outs);  // the is_global_zero guard mistake
    } else {
      ctx.pg->allreduce(t, PL_REDUCE_SUM);
    }
    c.expect(false, "collective #2 succeeded although the ranks called different things (variant " + variant + ")");
    return 1;
  } catch (const pl::Error& e) {
    const long long took = ms_since(t0);
    const std::string msg = e.what();
    std::cout << ctx.tag() << "error after " << took << " ms (code " << e.code() << "): " << msg << std::endl;
    c.expect(took <= within,
             "the error came after " + std::to_string(took) + " ms, not within " + std::to_string(within) + " ms");
    c.expect(e.code() != PL_ERR_TIMEOUT, "a mismatch must be reported as such, not as a timeout");
    c.expect(contains(msg, "#2"), "the message does not name the sequence number '#2'");
    for (const auto& alternatives : must_name) {
      bool any =
          std::any_of(alternatives.begin(), alternatives.end(), [&](const std::string& s) { return contains(msg, s); });
      c.expect(any, "the message does not name '" + alternatives.front() + "'");
    }
  }
  if (c.failed == 0) std::cout << ctx.tag() << "mismatch " << variant << ": OK" << std::endl;
  return c.failed ? 1 : 0;
}

// A process with the wrong PL_JOB_TOKEN must be refused by the store with an error that says so.
int run_intruder(Ctx& ctx, const pl::StoreOptions& so) {
  try {
    pl::Store s(*ctx.rt, so);
    s.set(ctx.group + "/intruder", "x");
    s.get(ctx.group + "/intruder", milliseconds(2000));
    std::cout << ctx.tag() << "FAIL the store accepted a client with a wrong PL_JOB_TOKEN" << std::endl;
    return 1;
  } catch (const pl::Error& e) {
    std::string msg = e.what(), lower = msg;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    std::cout << ctx.tag() << "refused (code " << e.code() << "): " << msg << std::endl;
    if (!contains(lower, "token")) {
      std::cout << ctx.tag() << "FAIL the refusal does not say that the token was wrong" << std::endl;
      return 1;
    }
    std::cout << ctx.tag() << "token: intruder refused: OK" << std::endl;
    return 0;
  }
}

int run_token(Ctx& ctx) {
  ctx.make_group(milliseconds(ctx.opt.get_int("timeout-ms", 60000)));
  good_allreduce(ctx);
  ctx.pg->barrier();
  std::cout << ctx.tag() << "token: group works: OK" << std::endl;
  return 0;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) throw std::invalid_argument("usage: pg_worker <matrix|missing|mismatch|token|gpus> [--flag value ...]");
  o.scenario = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "'");
    a = a.substr(2);
    if (auto eq = a.find('='); eq != std::string::npos)
      o.flags[a.substr(0, eq)] = a.substr(eq + 1);
    else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0)
      o.flags[a] = argv[++i];
    else
      o.flags[a] = "1";
  }
  return o;
}

int main_impl(int argc, char** argv) {
  Ctx ctx;
  try {
    ctx.opt = parse(argc, argv);
    if (ctx.opt.scenario == "gpus") {
      std::cout << "gpus " << cuda_device_count() << std::endl;
      return 0;
    }
    ctx.env = pl::DistEnv::from_env();
    ctx.backend = ctx.opt.get("backend", "gloo");
    ctx.group = ctx.opt.get("group", "pg_worker");
    const std::string dev = ctx.opt.get("device", "cpu");
    if (dev == "cuda")
      ctx.device = {PL_DEVICE_CUDA, ctx.env.local_rank};
    else if (dev != "cpu")
      throw std::invalid_argument("--device '" + dev + "': cpu or cuda");
    pl::RuntimeOptions ro;
    if (!std::getenv("PL_LOG_LEVEL")) ro.log_level = "warn";
    ctx.rt = std::make_unique<pl::Runtime>(ro);
  } catch (const std::exception& e) {
    std::cout << "pg_worker: " << e.what() << std::endl;
    return 2;
  }
  const pl::StoreOptions so = ctx.env.store_options(milliseconds(ctx.opt.get_int("store-timeout-ms", 60000)));
  if (ctx.opt.scenario == "token" && ctx.opt.has("intruder")) return run_intruder(ctx, so);
  try {
    ctx.store = std::make_unique<pl::Store>(*ctx.rt, so);
    if (ctx.opt.scenario == "matrix") return run_matrix(ctx);
    if (ctx.opt.scenario == "missing") return run_missing(ctx);
    if (ctx.opt.scenario == "mismatch") return run_mismatch(ctx);
    if (ctx.opt.scenario == "token") return run_token(ctx);
    std::cout << "pg_worker: unknown scenario '" << ctx.opt.scenario << "'" << std::endl;
    return 2;
  } catch (const pl::Error& e) {
    std::cout << ctx.tag() << "ERROR (code " << e.code() << "): " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cout << ctx.tag() << "ERROR: " << e.what() << std::endl;
    return 3;
  }
}

}  // namespace
}  // namespace pgtest

int main(int argc, char** argv) { return pgtest::main_impl(argc, argv); }
