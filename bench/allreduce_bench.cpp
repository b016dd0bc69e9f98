// allreduce_bench: plrt's ProcessGroup allreduce (blocking, sum) against Gloo called directly
// (gloo::allreduce with gloo::sum), in the style of nccl-tests, with the same algorithm on both
// sides (--algorithm).
//
//   allreduce_bench -b 1K -e 256M -f 2 -n 20 -w 5 [-r 5] [--ranks 2] [--dtype f32] [--backend gloo]
//                   [--stat call-median|median|min] [--algorithm ring|bcube|auto|all]
//
// --algorithm ring|bcube: the plrt group gets option allreduce=<it> and the direct Gloo call
// gloo::AllreduceOptions::Algorithm::<it>.  auto: the plrt group's own choice (option allreduce=auto)
// against direct Gloo with the same rule applied (auto_choice below mirrors the gloo plugin's, so
// keep the two in step).  all: five sides in one run, interleaved: plrt ring, bcube and auto, and
// Gloo ring and bcube; the table gives plrt/Gloo per algorithm and plrt auto against the better of
// plrt ring and bcube at that size.
//
// Without --worker the program is the launcher: it serves the rendezvous store, starts --ranks
// copies of itself (with --worker and the torchrun-style environment) and waits for them.  Rank 0
// prints one row per size.  For each size every side runs in the same processes, interleaved:
// for each of -r repetitions, -n back-to-back allreduces per side (the order of the sides rotating
// between repetitions), after a barrier.  A size's time is the median of the times of all its timed
// calls (--stat call-median, the default; robust on a noisy machine), or the median / minimum over
// the repetitions of their mean per call (--stat median|min); then the maximum over ranks.  The last
// line gives the geometric mean over the sizes from 1 MiB up of each ratio (a shared VM swings
// +-10% per size; the geometric mean is the figure to compare).
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "spawn.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int64_t min_bytes = 1 << 10, max_bytes = 256 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, reps = 5, ranks = 2, deadline_s = 3600;
  std::string dtype = "f32", backend = "gloo", stat = "call-median", algorithm = "auto";
  bool worker = false;
  std::vector<std::string> passthrough;  // the arguments the workers get
};

const char* kUsage =
    "usage: allreduce_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-r REPS]\n"
    "                       [--ranks N] [--dtype f32|f64|f16|i32|i64|u8] [--backend NAME]\n"
    "                       [--stat call-median|median|min] [--algorithm ring|bcube|auto|all] [--deadline-s S]\n"
    "  sizes in bytes with an optional K, M or G suffix (powers of 1024); defaults: -b 1K -e 256M -f 2\n"
    "  -n 20 -w 5 -r 5 --ranks 2 --dtype f32 --backend gloo --stat call-median --algorithm auto\n"
    "  --algorithm: the allreduce algorithm of both sides (all: ring, bcube and auto in one run)\n"
    "  call-median: the median of every timed call's time; median, min: of the repetitions' means\n";

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mult = unit.empty() || unit == "B" ? 1
                : unit[0] == 'K'            ? 1 << 10
                : unit[0] == 'M'            ? 1 << 20
                : unit[0] == 'G'            ? 1 << 30
                                            : -1;
  if (mult < 0 || v < 0) throw std::invalid_argument("bad size '" + s + "'");
  return static_cast<int64_t>(v * mult);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--worker") {
      a.worker = true;
      continue;
    }
    if (k == "-h" || k == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
    std::string v = argv[++i];
    a.passthrough.insert(a.passthrough.end(), {k, v});
    if (k == "-b")
      a.min_bytes = parse_bytes(v);
    else if (k == "-e")
      a.max_bytes = parse_bytes(v);
    else if (k == "-f")
      a.factor = std::stod(v);
    else if (k == "-n")
      a.iters = std::stoi(v);
    else if (k == "-w")
      a.warmup = std::stoi(v);
    else if (k == "-r")
      a.reps = std::stoi(v);
    else if (k == "--ranks")
      a.ranks = std::stoi(v);
    else if (k == "--dtype")
      a.dtype = v;
    else if (k == "--backend")
      a.backend = v;
    else if (k == "--deadline-s")
      a.deadline_s = std::stoi(v);
    else if (k == "--stat")
      a.stat = v;
    else if (k == "--algorithm")
      a.algorithm = v;
    else
      throw std::invalid_argument("unknown option '" + k + "'");
  }
  static const char* dtypes[] = {"f32", "f64", "f16", "i32", "i64", "u8"};
  if (std::find(std::begin(dtypes), std::end(dtypes), a.dtype) == std::end(dtypes))
    throw std::invalid_argument("--dtype '" + a.dtype + "': f32, f64, f16, i32, i64 or u8 (gloo has no bf16)");
  if (a.stat != "median" && a.stat != "min" && a.stat != "call-median")
    throw std::invalid_argument("--stat '" + a.stat + "': min, median or call-median");
  if (a.algorithm != "ring" && a.algorithm != "bcube" && a.algorithm != "auto" && a.algorithm != "all")
    throw std::invalid_argument("--algorithm '" + a.algorithm + "': ring, bcube, auto or all");
  if (a.factor <= 1 || a.iters < 1 || a.reps < 1 || a.ranks < 1 || a.min_bytes > a.max_bytes)
    throw std::invalid_argument("need -f > 1, -n >= 1, -r >= 1, --ranks >= 1 and -b <= -e");
  return a;
}

// ---- the launcher -------------------------------------------------------------------------------

int launch(const Args& a) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  self[n] = '\0';
  pl::RuntimeOptions ro;
  ro.log_level = "warn";
  pl::Runtime rt(ro);
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = plrt_test::random_token();
  pl::Store store(rt, so);

  plrt_test::DistJobOptions o;
  o.argv = {self};
  o.argv.insert(o.argv.end(), a.passthrough.begin(), a.passthrough.end());
  o.argv.push_back("--worker");
  o.world_size = a.ranks;
  o.master_port = store.port();
  o.token = *so.token;
  auto specs = plrt_test::dist_job(o);
  specs[0].capture_output = false;  // rank 0 prints the table as it goes
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(a.deadline_s);
  auto result = plrt_test::run_job(std::move(specs), w);
  if (result.all_ok()) return 0;
  std::cerr << "allreduce_bench: the ranks did not all succeed\n" << result.report();
  return 1;
}

// ---- the workers --------------------------------------------------------------------------------

// Gloo's rendezvous over the plrt store (the same TCP store the process group uses).
class GlooStoreOverPl : public gloo::rendezvous::Store {
 public:
  GlooStoreOverPl(const pl::Store& s, std::string prefix) : s_(s), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = s_.get(prefix_ + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(0)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    s_.wait(full, timeout);
  }

 private:
  const pl::Store& s_;
  std::string prefix_;
};

// The median (or the minimum) of the repetitions' times.
double summarize(std::vector<double> v, const std::string& stat) {
  std::sort(v.begin(), v.end());
  if (stat == "min") return v.front();
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The gloo plugin's `auto` (plrt::gloo_pg::use_bcube in plugins/process_groups/gloo): keep in step.
bool auto_bcube(int world, size_t bytes) { return (world & (world - 1)) == 0 && bytes < (size_t{128} << 20); }

struct Worker {
  const Args& a;
  int rank = 0, world = 1;
  std::vector<std::pair<std::string, const pl::ProcessGroup*>> groups;  // plrt sides: algorithm, group
  std::vector<std::string> gloo_algos;                                  // direct Gloo sides
  std::shared_ptr<gloo::Context> gctx;

  void gloo_barrier() {
    gloo::BarrierOptions o(gctx);
    gloo::barrier(o);
  }

  // The maximum over ranks of v (each element).
  void max_over_ranks(std::vector<double>& v) {
    gloo::AllreduceOptions o(gctx);
    o.setOutput(v.data(), v.size());
    o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    o.setTag(7);
    gloo::allreduce(o);
  }

  struct Side {
    std::string name;  // "plrt ring", "gloo bcube"
    std::function<void()> call;
  };

  // T: the storage type; G: Gloo's type for it (gloo::float16 for f16).
  template <class T, class G>
  void run(PL_DType dtype) {
    const double bus = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    std::vector<T> buf;
    size_t count = 0;
    PL_Tensor t{};
    std::vector<Side> sides;
    for (const auto& g : groups)
      sides.push_back({"plrt " + g.first, [&, pg = g.second] { pg->allreduce(t, PL_REDUCE_SUM); }});
    for (const auto& algo : gloo_algos)
      // As a direct user of Gloo (and PyTorch's ProcessGroupGloo) does: options built per call.
      sides.push_back({"gloo " + algo, [&, algo] {
                         gloo::AllreduceOptions go(gctx);
                         const bool bcube = algo == "bcube" || (algo == "auto" && auto_bcube(world, count * sizeof(T)));
                         if (bcube) go.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
                         go.setOutput(reinterpret_cast<G*>(buf.data()), count);
                         go.setReduceFunction(
                             static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<G>));
                         go.setTag(1);
                         gloo::allreduce(go);
                       }});
    // The ratios printed: plrt busbw / Gloo busbw per algorithm, and (--algorithm all) plrt auto
    // against the better of plrt ring and bcube.
    struct Ratio {
      std::string name;
      size_t num;                      // ratio = the best time of the sides `dens` / the time of side `num`
      std::vector<size_t> dens;        //   (= busbw of num / the best busbw of dens)
      std::vector<double> logs;        // log(ratio) at each size from 1 MiB up
      std::optional<double> added_4k;  // time of num - the best time of dens at 4 KiB (us)
    };
    std::vector<Ratio> ratios;
    auto index = [&](const std::string& n) {
      for (size_t i = 0; i < sides.size(); ++i)
        if (sides[i].name == n) return i;
      return sides.size();
    };
    for (const auto& g : groups)
      if (index("gloo " + g.first) < sides.size())
        ratios.push_back({g.first + " plrt/gloo", index("plrt " + g.first), {index("gloo " + g.first)}, {}, {}});
    if (a.algorithm == "all")
      ratios.push_back({"auto/best", index("plrt auto"), {index("plrt ring"), index("plrt bcube")}, {}, {}});

    if (rank == 0) {
      std::printf(
          "# allreduce_bench: %d ranks on 127.0.0.1, %s sum, plrt backend '%s' vs gloo::allreduce, "
          "--algorithm %s\n"
          "# time = %s of %d repetitions x %d calls (after %d warm-up calls), max over ranks\n"
          "# busbw = algbw * 2(n-1)/n (GB/s);  a ratio > 1: the first side is faster\n#\n",
          world, pl_dtype_name(dtype), a.backend.c_str(), a.algorithm.c_str(), a.stat.c_str(), a.reps, a.iters,
          a.warmup);
      std::printf("# %10s", "size (B)");
      for (const auto& sd : sides) std::printf(" | %10s us %6s", sd.name.c_str(), "busbw");
      for (const auto& r : ratios) std::printf(" | %s", r.name.c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
    for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes;) {
      count = static_cast<size_t>(bytes) / sizeof(T);
      buf.assign(std::max<size_t>(count, 1), T{});
      t = pl::tensor_view(buf.data(), dtype, static_cast<int64_t>(count));
      for (const auto& sd : sides) verify<T>(buf, count, sd.call, sd.name.c_str());
      std::fill(buf.begin(), buf.end(), T{});  // zeros: sums stay exact and never overflow
      for (int i = 0; i < a.warmup; ++i)
        for (const auto& sd : sides) sd.call();
      std::vector<std::vector<double>> reps(sides.size()), calls(sides.size());  // mean per call; per call
      for (int rep = 0; rep < a.reps; ++rep) {
        for (size_t k = 0; k < sides.size(); ++k) {
          const size_t which = (k + static_cast<size_t>(rep)) % sides.size();  // rotate the order
          gloo_barrier();
          const auto t0 = Clock::now();
          auto prev = t0;
          for (int i = 0; i < a.iters; ++i) {
            sides[which].call();
            const auto now = Clock::now();
            calls[which].push_back(std::chrono::duration<double, std::micro>(now - prev).count());
            prev = now;
          }
          reps[which].push_back(std::chrono::duration<double, std::micro>(prev - t0).count() / a.iters);
        }
      }
      std::vector<double> times;
      for (size_t k = 0; k < sides.size(); ++k)
        times.push_back(a.stat == "call-median" ? summarize(calls[k], "median") : summarize(reps[k], a.stat));
      max_over_ranks(times);
      if (rank == 0) std::printf("  %10lld", (long long)bytes);
      for (size_t k = 0; k < sides.size() && rank == 0; ++k)
        std::printf(" | %13.1f %6.3f", times[k], bytes / times[k] / 1e3 * bus);  // bytes/us/1e3 = GB/s
      for (auto& r : ratios) {
        double best = times[r.dens[0]];
        for (size_t d : r.dens) best = std::min(best, times[d]);
        const double ratio = best / times[r.num];
        if (rank == 0) std::printf(" | %*.3f", static_cast<int>(r.name.size()), ratio);
        if (bytes >= (1 << 20)) r.logs.push_back(std::log(ratio));
        if (bytes == 4096) r.added_4k = times[r.num] - best;
      }
      if (rank == 0) {
        std::printf("\n");
        std::fflush(stdout);
      }
      int64_t next = static_cast<int64_t>(bytes * a.factor);
      bytes = std::max<int64_t>(next, bytes + static_cast<int64_t>(sizeof(T)));
    }
    if (rank == 0) {
      std::printf("#\n");
      for (const auto& r : ratios) {
        if (r.added_4k)
          std::printf("# %s: added latency at 4 KiB %.2f us (target <= 5 us)\n", r.name.c_str(), *r.added_4k);
        if (r.logs.empty()) continue;
        double sum = 0, lowest = 1e9;
        for (double l : r.logs) sum += l, lowest = std::min(lowest, std::exp(l));
        std::printf("# %s from 1 MiB up: geometric mean %.3f, lowest %.3f (%zu sizes)\n", r.name.c_str(),
                    std::exp(sum / r.logs.size()), lowest, r.logs.size());
      }
      std::fflush(stdout);
    }
  }

  // Rank r contributes r+1 everywhere: every element must come back as W(W+1)/2.
  template <class T, class Call>
  void verify(std::vector<T>& buf, size_t count, Call&& call, const char* who) {
    const T mine = to_t<T>(rank + 1), want = to_t<T>(world * (world + 1) / 2);
    std::fill(buf.begin(), buf.end(), mine);
    call();
    for (size_t i = 0; i < count; ++i)
      if (std::memcmp(&buf[i], &want, sizeof(T)) != 0)
        throw std::runtime_error(std::string(who) + " allreduce gave a wrong sum at element " + std::to_string(i));
  }

  template <class T>
  static T to_t(int v) {
    if constexpr (std::is_same_v<T, gloo::float16>)
      return gloo::cpu_float2half_rn(static_cast<float>(v));
    else
      return static_cast<T>(v);
  }
};

int work(const Args& a) {
  pl::DistEnv env = pl::DistEnv::from_env();
  pl::RuntimeOptions ro;
  ro.log_level = "warn";
  pl::Runtime rt(ro);
  pl::Store store(rt, env.store_options(std::chrono::seconds(120)));
  std::vector<std::string> algos =
      a.algorithm == "all" ? std::vector<std::string>{"ring", "bcube", "auto"} : std::vector<std::string>{a.algorithm};
  std::vector<std::unique_ptr<pl::ProcessGroup>> pgs;
  Worker w{a, env.rank, env.world_size, {}, {}, nullptr};
  for (const auto& algo : algos) {
    pl::ProcessGroupOptions po;
    po.rank = env.rank;
    po.world_size = env.world_size;
    po.group_name = "bench-" + algo;
    po.timeout = std::chrono::seconds(600);
    if (a.backend == "gloo") po.options = {{"allreduce", algo}};
    pgs.push_back(std::make_unique<pl::ProcessGroup>(rt, a.backend, store, po));
    w.groups.push_back({algo, pgs.back().get()});
    if (a.algorithm != "all" || algo != "auto") w.gloo_algos.push_back(algo);
  }

  GlooStoreOverPl gstore(store, "bench/gloo/");
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto gctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
  gctx->setTimeout(std::chrono::seconds(600));
  gctx->connectFullMesh(gstore, dev);
  w.gctx = gctx;

  if (a.dtype == "f32")
    w.run<float, float>(PL_F32);
  else if (a.dtype == "f64")
    w.run<double, double>(PL_F64);
  else if (a.dtype == "f16")
    w.run<gloo::float16, gloo::float16>(PL_F16);
  else if (a.dtype == "i32")
    w.run<int32_t, int32_t>(PL_I32);
  else if (a.dtype == "i64")
    w.run<int64_t, int64_t>(PL_I64);
  else
    w.run<uint8_t, uint8_t>(PL_U8);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    return a.worker ? work(a) : launch(a);
  } catch (const std::exception& e) {
    std::cerr << "allreduce_bench: " << e.what() << "\n"
              << (std::string(e.what()).find("option") != std::string::npos ? kUsage : "");
    return 2;
  }
}
