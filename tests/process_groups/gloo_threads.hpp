// Gloo's test habit: one thread per rank in one process.  The test serves the rendezvous store
// (pl::Store, port 0); every rank thread makes its own pl::Runtime, its own pl::Store client and
// its pl::ProcessGroup("gloo").  Every wait is bounded: groups get short timeouts, and a rank
// thread that throws records the failure instead of leaving the others waiting forever.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "half.hpp"  // plugins/common: bit-exact f16/bf16 conversions

namespace gloo_threads {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline pl::RuntimeOptions runtime_options() {
  pl::RuntimeOptions o;
  o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};  // this build's plugins only
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = "off";  // the tests check the errors themselves
  return o;
}

struct GroupOptions {
  std::chrono::milliseconds timeout = 20s;
  std::vector<std::pair<std::string, std::string>> options;
  std::string name = "default";
};

// What a rank thread gets.
struct Rank {
  int rank = 0, world = 1;
  pl::Runtime* rt = nullptr;
  pl::Store* store = nullptr;
  pl::ProcessGroup* pg = nullptr;
};

// A one-shot flag that rank threads wait on with a bound.
class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> g(m_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lk(m_);
    return cv_.wait_for(lk, bound, [&] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

class Job {
 public:
  explicit Job(int world) : world_(world) {
    server_rt_ = std::make_unique<pl::Runtime>(runtime_options());
    pl::StoreOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.is_server = true;
    so.token = "gloo-threads-test";
    so.timeout = 20s;
    server_ = std::make_unique<pl::Store>(*server_rt_, so);
  }

  int world() const { return world_; }

  // Runs body(rank) on one thread per rank, after each has connected its store and created its
  // group; returns when every thread has finished.  An exception in a rank thread fails the test.
  void run(const std::function<void(Rank&)>& body, const GroupOptions& go = {}) {
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r) threads.emplace_back([&, r] { rank_main(r, body, go); });
    for (auto& t : threads) t.join();
  }

  pl::StoreOptions client_options() const {
    pl::StoreOptions so;
    so.host = "127.0.0.1";
    so.port = server_->port();
    so.token = "gloo-threads-test";
    so.timeout = 20s;
    return so;
  }

 private:
  void rank_main(int r, const std::function<void(Rank&)>& body, const GroupOptions& go) {
    try {
      pl::Runtime rt(runtime_options());
      pl::Store store(rt, client_options());
      pl::ProcessGroupOptions po;
      po.rank = r;
      po.world_size = world_;
      po.group_name = go.name;
      po.timeout = go.timeout;
      po.options = go.options;
      pl::ProcessGroup pg(rt, "gloo", store, po);
      Rank ctx{r, world_, &rt, &store, &pg};
      body(ctx);
    } catch (const pl::Error& e) {
      ADD_FAILURE() << "rank " << r << ": pl::Error " << e.code() << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }

  int world_;
  std::unique_ptr<pl::Runtime> server_rt_;
  std::unique_ptr<pl::Store> server_;
};

// ---- typed storage: every dtype in a byte buffer, values set and read as double ---------------

inline const std::vector<PL_DType>& all_dtypes() {
  static const std::vector<PL_DType> d = {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8};
  return d;
}

inline void put(PL_DType dt, void* base, size_t i, double v) {
  switch (dt) {
    case PL_F32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case PL_F64:
      static_cast<double*>(base)[i] = v;
      break;
    case PL_F16:
      static_cast<uint16_t*>(base)[i] = plrt::cpu::f64_to_f16(v);
      break;
    case PL_BF16:
      static_cast<uint16_t*>(base)[i] = plrt::cpu::f64_to_bf16(v);
      break;
    case PL_I32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case PL_I64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case PL_U8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    default:
      break;
  }
}

inline double get(PL_DType dt, const void* base, size_t i) {
  switch (dt) {
    case PL_F32:
      return static_cast<const float*>(base)[i];
    case PL_F64:
      return static_cast<const double*>(base)[i];
    case PL_F16:
      return plrt::cpu::f16_to_f64(static_cast<const uint16_t*>(base)[i]);
    case PL_BF16:
      return plrt::cpu::bf16_to_f64(static_cast<const uint16_t*>(base)[i]);
    case PL_I32:
      return static_cast<const int32_t*>(base)[i];
    case PL_I64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case PL_U8:
      return static_cast<const uint8_t*>(base)[i];
    default:
      return 0;
  }
}

// A buffer of n elements of dt (never empty, so data is never NULL).
struct Buf {
  PL_DType dt;
  size_t n;
  std::vector<uint8_t> bytes;
  Buf(PL_DType d, size_t count) : dt(d), n(count), bytes(std::max<size_t>(count, 1) * pl_dtype_size(d), 0xAB) {}
  void set(size_t i, double v) { put(dt, bytes.data(), i, v); }
  double at(size_t i) const { return get(dt, bytes.data(), i); }
  PL_Tensor tensor() { return pl::tensor_view(bytes.data(), dt, static_cast<int64_t>(n)); }
  PL_Tensor tensor_at(size_t first, size_t count) {
    return pl::tensor_view(bytes.data() + first * pl_dtype_size(dt), dt, static_cast<int64_t>(count));
  }
};

// Element i of `got` equals `want` exactly, as the dtype stores it (both converted by put()).
inline ::testing::AssertionResult same_element(PL_DType dt, const void* got, size_t i, double want) {
  uint8_t w[8] = {};
  put(dt, w, 0, want);
  const size_t es = pl_dtype_size(dt);
  if (std::memcmp(static_cast<const uint8_t*>(got) + i * es, w, es) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << pl_dtype_name(dt) << " element " << i << " is " << get(dt, got, i)
                                       << ", expected " << get(dt, w, 0);
}

inline bool is_float(PL_DType dt) { return dt == PL_F32 || dt == PL_F64 || dt == PL_F16 || dt == PL_BF16; }

// Test values: small integers, exact in every dtype, and so are their sums (|sum| <= 3 * 16) and
// products (|product| <= 27).  uint8 gets non-negative ones.
inline double value(PL_DType dt, int rank, size_t i, PL_ReduceOp op = PL_REDUCE_SUM) {
  if (op == PL_REDUCE_PRODUCT) {
    const double v = static_cast<double>((rank + i) % 3 + 1);  // 1, 2, 3
    return (dt == PL_U8 || (i + static_cast<size_t>(rank)) % 2 == 0) ? v : -v;
  }
  const int v = static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 17);
  return dt == PL_U8 ? v : v - 8;
}

// The expected reduction over `world` ranks of value(dt, r, i, op).
inline double reduced(PL_DType dt, PL_ReduceOp op, int world, size_t i) {
  double acc = value(dt, 0, i, op);
  for (int r = 1; r < world; ++r) {
    const double v = value(dt, r, i, op);
    switch (op) {
      case PL_REDUCE_SUM:
      case PL_REDUCE_AVG:
        acc += v;
        break;
      case PL_REDUCE_PRODUCT:
        acc *= v;
        break;
      case PL_REDUCE_MIN:
        acc = std::min(acc, v);
        break;
      case PL_REDUCE_MAX:
        acc = std::max(acc, v);
        break;
      default:
        break;
    }
  }
  if (op != PL_REDUCE_AVG) return acc;
  if (is_float(dt)) return acc / world;                           // put() rounds it once, as the plugin does
  return static_cast<double>(static_cast<int64_t>(acc) / world);  // toward zero
}

inline const std::vector<PL_ReduceOp>& all_reduce_ops() {
  static const std::vector<PL_ReduceOp> o = {PL_REDUCE_SUM, PL_REDUCE_AVG, PL_REDUCE_MIN, PL_REDUCE_MAX,
                                             PL_REDUCE_PRODUCT};
  return o;
}

inline std::string case_name(const char* op, PL_DType dt, size_t n, PL_ReduceOp red = 0) {
  std::string s = std::string(op) + " " + pl_dtype_name(dt) + " n=" + std::to_string(n);
  if (red) s += " op=" + std::to_string(red);
  return s;
}

inline const std::vector<size_t>& sizes() {
  static const std::vector<size_t> s = {0, 1, 7, 1000};
  return s;
}

// Milliseconds since `t0`.
inline long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// What a call that must fail threw: its code, message and how long it took.
struct Caught {
  PL_ErrorCode code = PL_ERR_OK;
  std::string message;
  long long ms = 0;
};

// Runs f, which must throw pl::Error (else the test fails).
template <class F>
Caught expect_error(F&& f) {
  const auto t0 = Clock::now();
  try {
    f();
  } catch (const pl::Error& e) {
    return {e.code(), e.what(), ms_since(t0)};
  }
  ADD_FAILURE() << "no error";
  return {PL_ERR_OK, "", ms_since(t0)};
}

}  // namespace gloo_threads
