// pg_worker matrix: every collective x every dtype x the given sizes, each element checked against
// the answer computed locally (pg_values.hpp).  Outputs start as the bitwise complement of the
// expected answer, so an element the plugin never writes is always caught.
//
//   --sizes 0,1,7,1048576,64MiB   a plain number is an element count; KiB/MiB/GiB are bytes of the
//                                 dtype at hand (64MiB = 16777216 float32, 67108864 uint8)
//   --ops allreduce,broadcast,allgather,allgatherv,reduce_scatter,all_to_all,barrier,sendrecv,async
//                                 (all_to_all: n elements to each rank, then per-rank counts with
//                                 zeros; the size is each chunk's)
//   --dtypes f32,f64,f16,bf16,i32,i64,u8    --reduce-ops sum,avg,min,max,product    --roots all|ends
//   --gather-total                for allgather(v) and reduce_scatter the size is the total over the
//                                 ranks (each rank's part: size / W), not each rank's part
//   --verbose                     rank 0 prints each case's time
//   --p2p async,blocking          the send/recv rings: isend+irecv then wait, and blocking calls
#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "pg_values.hpp"
#include "pg_worker.hpp"

namespace pgtest {
namespace {

using Clock = std::chrono::steady_clock;

struct SizeSpec {
  int64_t value = 0;
  bool bytes = false;  // value is bytes, divided by the element size
  std::string text;
  int64_t numel(PL_DType dt) const { return bytes ? value / static_cast<int64_t>(pl_dtype_size(dt)) : value; }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

SizeSpec parse_size(const std::string& s) {
  size_t pos = 0;
  long long v = std::stoll(s, &pos);
  const std::string unit = s.substr(pos);
  SizeSpec out{v, !unit.empty(), s};
  if (unit == "KiB")
    out.value <<= 10;
  else if (unit == "MiB")
    out.value <<= 20;
  else if (unit == "GiB")
    out.value <<= 30;
  else if (!unit.empty())
    throw std::invalid_argument("--sizes: '" + s + "' (use a count, or KiB/MiB/GiB)");
  if (v < 0) throw std::invalid_argument("--sizes: '" + s + "' is negative");
  return out;
}

PL_DType parse_dtype(const std::string& s) {
  static const std::pair<const char*, PL_DType> names[] = {{"f32", PL_F32},   {"f64", PL_F64}, {"f16", PL_F16},
                                                           {"bf16", PL_BF16}, {"i32", PL_I32}, {"i64", PL_I64},
                                                           {"u8", PL_U8}};
  for (const auto& [name, dt] : names)
    if (s == name || s == pl_dtype_name(dt)) return dt;
  throw std::invalid_argument("--dtypes: unknown dtype '" + s + "'");
}

PL_ReduceOp parse_reduce(const std::string& s) {
  for (PL_ReduceOp op : {PL_REDUCE_SUM, PL_REDUCE_AVG, PL_REDUCE_MIN, PL_REDUCE_MAX, PL_REDUCE_PRODUCT})
    if (s == reduce_name(op)) return op;
  throw std::invalid_argument("--reduce-ops: unknown op '" + s + "'");
}

class Matrix {
 public:
  explicit Matrix(Ctx& ctx) : ctx_(ctx), r_(ctx.rank()), W_(ctx.world()) {
    const auto& o = ctx.opt;
    for (const auto& s : split(o.get("sizes", "0,1,7,1048576"))) sizes_.push_back(parse_size(s));
    for (const auto& s : split(
             o.get("ops", "allreduce,broadcast,allgather,allgatherv,reduce_scatter,all_to_all,barrier,sendrecv,async")))
      ops_.insert(s);
    for (const auto& s : split(o.get("dtypes", "f32,f64,f16,bf16,i32,i64,u8"))) dtypes_.push_back(parse_dtype(s));
    for (const auto& s : split(o.get("reduce-ops", "sum,avg,min,max,product"))) rops_.push_back(parse_reduce(s));
    for (const auto& s : split(o.get("p2p", "async,blocking"))) p2p_modes_.insert(s);
    gather_total_ = o.has("gather-total");
    verbose_ = o.has("verbose");
    const std::string roots = o.get("roots", "all");
    for (int q = 0; q < W_; ++q)
      if (roots == "all" || q == 0 || q == W_ - 1) roots_.push_back(q);
  }

  int run() {
    auto t0 = Clock::now();
    ctx_.make_group(std::chrono::milliseconds(ctx_.opt.get_int("timeout-ms", 60000)));
    try {
      for (const auto& size : sizes_) {
        auto ts = Clock::now();
        if (ops_.count("barrier")) barrier(size.text);
        for (PL_DType dt : dtypes_) {
          const int64_t n = size.numel(dt);
          with_dtype(dt, [&](auto tag) { this->all_ops<typename decltype(tag)::type>(n); });
        }
        std::cout << ctx_.tag() << "size " << size.text << " done in " << secs(ts) << " s" << std::endl;
      }
    } catch (const std::exception& e) {
      std::cout << ctx_.tag() << "ERROR in " << case_ << ": " << e.what() << std::endl;
      return 3;
    }
    std::cout << ctx_.tag() << "matrix: " << checks_ << " checks, " << failed_ << " failed, " << secs(t0) << " s"
              << std::endl;
    return failed_ ? 1 : 0;
  }

 private:
  static double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  template <class T, class V>
  static void fill(Buffer& b, int64_t offset, int64_t n, V value) {
    T* p = b.as<T>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = Traits<T>::store(value(i));
  }
  // The complement of what must arrive: any element left unwritten is wrong.
  template <class T, class V>
  static void fill_not(Buffer& b, int64_t offset, int64_t n, V value) {
    fill<T>(b, offset, n, value);
    uint8_t* p = b.host() + offset * sizeof(T);
    for (size_t i = 0; i < n * sizeof(T); ++i) p[i] = static_cast<uint8_t>(~p[i]);
  }

  template <class T, class V>
  void check(Buffer& b, int64_t offset, int64_t n, V want, bool tolerant = false) {
    using L = typename Traits<T>::L;
    const T* p = b.as<T>() + offset;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const L e = want(i), g = Traits<T>::load(p[i]);
      bool ok = g == e;
      if constexpr (Traits<T>::is_float)
        if (tolerant && !ok) ok = std::fabs(g - e) <= std::fabs(e) * Traits<T>::ulp;
      if (ok) continue;
      if (++bad <= 5)
        std::cout << ctx_.tag() << "FAIL " << case_ << " index=" << i << " expected=" << show(e) << " got=" << show(g)
                  << "\n";
    }
    if (bad > 5) std::cout << ctx_.tag() << "FAIL " << case_ << ": " << bad << " of " << n << " elements wrong\n";
    std::cout.flush();
    ++checks_;
    if (bad) ++failed_;
  }

  void label(const std::string& op, PL_DType dt, int64_t n, const std::string& extra = "") {
    if (verbose_ && r_ == 0) std::cout << ctx_.tag() << case_ << ": " << secs(case_start_) << " s" << std::endl;
    case_start_ = Clock::now();
    case_ = "op=" + op + " dtype=" + pl_dtype_name(dt) + " numel=" + std::to_string(n) + extra;
  }

  void barrier(const std::string& size) {
    case_ = "op=barrier (before size " + size + ")";
    const std::string key = ctx_.group + "/barrier/" + size + "/";
    ctx_.store->set(key + std::to_string(r_), "1");
    ctx_.pg->barrier();
    std::vector<std::string> keys;
    for (int q = 0; q < W_; ++q) keys.push_back(key + std::to_string(q));
    ++checks_;
    if (!ctx_.store->check_keys(keys)) {
      ++failed_;
      std::cout << ctx_.tag() << "FAIL " << case_ << ": returned before every rank had arrived" << std::endl;
    }
  }

  // allgather and reduce_scatter: the per-rank count for size n (--gather-total: n is the total).
  int64_t chunk(int64_t n) const { return gather_total_ ? n / W_ : n; }

  template <class T>
  void all_ops(int64_t n) {
    constexpr PL_DType dt = Traits<T>::dtype;
    const auto& pg = *ctx_.pg;
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    auto plain = [&](int q) { return [q, this](int64_t i) { return input<T>(Kind::Plain, q, W_, i); }; };

    if (ops_.count("allreduce"))
      for (PL_ReduceOp op : rops_) {
        label(std::string("allreduce(") + reduce_name(op) + ")", dt, n);
        Buffer b(ctx_.device, bytes);
        fill<T>(b, 0, n, [&](int64_t i) { return input<T>(kind_of(op), r_, W_, i); });
        b.upload();
        PL_Tensor t = b.tensor(dt, n);
        pg.allreduce(t, op);
        b.download();
        check<T>(
            b, 0, n, [&](int64_t i) { return expected<T>(op, W_, i); }, op == PL_REDUCE_AVG);
      }

    if (ops_.count("broadcast"))
      for (int root : roots_) {
        label("broadcast", dt, n, " root=" + std::to_string(root));
        Buffer b(ctx_.device, bytes);
        if (r_ == root)
          fill<T>(b, 0, n, plain(root));
        else
          fill_not<T>(b, 0, n, plain(root));
        b.upload();
        PL_Tensor t = b.tensor(dt, n);
        pg.broadcast(t, root);
        b.download();
        check<T>(b, 0, n, plain(root));
      }

    for (const char* op : {"allgather", "allgatherv"}) {
      if (!ops_.count(op)) continue;
      const bool v = std::string(op) == "allgatherv";
      const int64_t c = chunk(n);
      auto count = [&](int64_t q) { return v ? c + 3 * q : c; };  // allgatherv: per-rank sizes
      label(op, dt, count(r_));
      Buffer in(ctx_.device, count(r_) * sizeof(T));
      fill<T>(in, 0, count(r_), plain(r_));
      int64_t total = 0;
      for (int q = 0; q < W_; ++q) total += count(q);
      Buffer out(ctx_.device, total * sizeof(T));
      std::vector<PL_Tensor> outs;
      for (int64_t q = 0, off = 0; q < W_; off += count(q), ++q)
        fill_not<T>(out, off, count(q), plain(static_cast<int>(q)));
      for (int64_t q = 0, off = 0; q < W_; off += count(q), ++q) outs.push_back(out.tensor(dt, count(q), off));
      in.upload();
      out.upload();
      pg.allgather(in.tensor(dt, count(r_)), outs);
      out.download();
      for (int64_t q = 0, off = 0; q < W_; off += count(q), ++q) {
        label(op, dt, count(q), " from_rank=" + std::to_string(q));
        check<T>(out, off, count(q), plain(static_cast<int>(q)));
      }
    }

    if (ops_.count("reduce_scatter"))
      for (PL_ReduceOp op : rops_) {
        const int64_t c = chunk(n), cbytes = c * static_cast<int64_t>(sizeof(T));
        label(std::string("reduce_scatter(") + reduce_name(op) + ")", dt, c);
        Buffer in(ctx_.device, W_ * cbytes), out(ctx_.device, cbytes);
        fill<T>(in, 0, W_ * c, [&](int64_t i) { return input<T>(kind_of(op), r_, W_, i); });  // chunk q: indices q*c..
        fill_not<T>(out, 0, c, [&](int64_t i) { return expected<T>(op, W_, r_ * c + i); });
        std::vector<PL_Tensor> ins;
        for (int q = 0; q < W_; ++q) ins.push_back(in.tensor(dt, c, q * c));
        in.upload();
        out.upload();
        PL_Tensor t = out.tensor(dt, c);
        pg.reduce_scatter(ins, t, op);
        out.download();
        check<T>(
            out, 0, c, [&](int64_t i) { return expected<T>(op, W_, r_ * c + i); }, op == PL_REDUCE_AVG);
      }

    if (ops_.count("all_to_all"))
      for (bool uneven : {false, true}) all_to_all<T>(n, uneven);

    if (ops_.count("sendrecv") && W_ > 1) sendrecv<T>(n);
    if (ops_.count("async")) async_ops<T>(n);
  }

  // all_to_all: rank p sends count(p, q) elements to rank q, the slice of its input at that
  // chunk's offset; what arrives from rank p is checked against p's input values at p's offsets.
  template <class T>
  void all_to_all(int64_t n, bool uneven) {
    constexpr PL_DType dt = Traits<T>::dtype;
    auto count = [&](int p, int q) -> int64_t { return !uneven ? n : (p + 2 * q) % 3 == 0 ? 0 : n + p + q; };
    auto offset = [&](int p, int q) {  // where chunk q starts in rank p's input
      int64_t at = 0;
      for (int j = 0; j < q; ++j) at += count(p, j);
      return at;
    };
    std::vector<int64_t> send, recv;
    int64_t n_in = 0, n_out = 0;
    for (int q = 0; q < W_; ++q) {
      send.push_back(count(r_, q));
      recv.push_back(count(q, r_));
      n_in += send.back();
      n_out += recv.back();
    }
    label(uneven ? "all_to_all(per-rank counts)" : "all_to_all(equal chunks)", dt, n_in);
    Buffer in(ctx_.device, n_in * sizeof(T)), out(ctx_.device, n_out * sizeof(T));
    fill<T>(in, 0, n_in, [&](int64_t i) { return input<T>(Kind::Plain, r_, W_, i); });
    std::vector<int64_t> at(static_cast<size_t>(W_) + 1, 0);  // where rank p's chunk lands in the output
    for (int p = 0; p < W_; ++p) at[p + 1] = at[p] + recv[p];
    for (int p = 0; p < W_; ++p) {
      const int64_t from = offset(p, r_);
      fill_not<T>(out, at[p], recv[p], [&, p, from](int64_t i) { return input<T>(Kind::Plain, p, W_, from + i); });
    }
    in.upload();
    out.upload();
    PL_Tensor ti = in.tensor(dt, n_in), to = out.tensor(dt, n_out);
    if (uneven)
      ctx_.pg->all_to_all(ti, to, send, recv);
    else
      ctx_.pg->all_to_all(ti, to);
    out.download();
    for (int p = 0; p < W_; ++p) {
      const int64_t from = offset(p, r_);
      label(uneven ? "all_to_all(per-rank counts)" : "all_to_all(equal chunks)", dt, recv[p],
            " from_rank=" + std::to_string(p));
      check<T>(out, at[p], recv[p], [&, p, from](int64_t i) { return input<T>(Kind::Plain, p, W_, from + i); });
    }
  }

  // A ring: each rank sends to the next and receives from the previous; async, then blocking with
  // even ranks sending first (async too with nccl, whose sends and receives run one at a time).
  template <class T>
  void sendrecv(int64_t n) {
    constexpr PL_DType dt = Traits<T>::dtype;
    const int next = (r_ + 1) % W_, prev = (r_ + W_ - 1) % W_;
    auto from_prev = [&](int64_t i) { return input<T>(Kind::Plain, prev, W_, i); };
    for (bool blocking : {false, true}) {
      if (!p2p_modes_.count(blocking ? "blocking" : "async")) continue;
      label(blocking ? "send/recv(blocking ring)" : "send/recv(async ring)", dt, n,
            " from_rank=" + std::to_string(prev));
      Buffer s(ctx_.device, n * sizeof(T)), rcv(ctx_.device, n * sizeof(T));
      fill<T>(s, 0, n, [&](int64_t i) { return input<T>(Kind::Plain, r_, W_, i); });
      fill_not<T>(rcv, 0, n, from_prev);
      s.upload();
      rcv.upload();
      PL_Tensor st = s.tensor(dt, n), rt = rcv.tensor(dt, n);
      const int tag = ++tag_;
      if (blocking && r_ % 2 == 0) {
        ctx_.pg->send(st, next, tag);
        ctx_.pg->recv(rt, prev, tag);
      } else if (blocking) {
        ctx_.pg->recv(rt, prev, tag);
        ctx_.pg->send(st, next, tag);
      } else if (ctx_.backend == "nccl" && r_ % 2 == 1) {
        // nccl runs send/recv one at a time on its stream (README): odd ranks receive first.
        pl::Work rw = ctx_.pg->recv_async(rt, prev, tag);
        pl::Work sw = ctx_.pg->send_async(st, next, tag);
        rw.wait();
        sw.wait();
      } else {
        pl::Work sw = ctx_.pg->send_async(st, next, tag);
        pl::Work rw = ctx_.pg->recv_async(rt, prev, tag);
        rw.wait();
        sw.wait();
      }
      rcv.download();
      check<T>(rcv, 0, n, from_prev);
    }
  }

  // Five operations in flight at once, completed in reverse order (one by polling test()).
  template <class T>
  void async_ops(int64_t n) {
    constexpr PL_DType dt = Traits<T>::dtype;
    const auto& pg = *ctx_.pg;
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    label("async(allreduce sum+max, allgather, reduce_scatter sum, broadcast)", dt, n);
    Buffer a(ctx_.device, bytes), b(ctx_.device, bytes), g_in(ctx_.device, bytes), g_out(ctx_.device, W_ * bytes),
        rs_in(ctx_.device, W_ * bytes), rs_out(ctx_.device, bytes), bc(ctx_.device, bytes);
    auto in_of = [&](Kind k) { return [k, this](int64_t i) { return input<T>(k, r_, W_, i); }; };
    fill<T>(a, 0, n, in_of(Kind::Sum));
    fill<T>(b, 0, n, in_of(Kind::MinMax));
    fill<T>(g_in, 0, n, in_of(Kind::Plain));
    fill<T>(rs_in, 0, W_ * n, in_of(Kind::Sum));
    const int root = W_ - 1;
    auto bcast = [&](int64_t i) { return input<T>(Kind::Plain, root, W_, i); };
    if (r_ == root) fill<T>(bc, 0, n, bcast);
    for (Buffer* x : {&a, &b, &g_in, &g_out, &rs_in, &rs_out, &bc}) x->upload();
    PL_Tensor ta = a.tensor(dt, n), tb = b.tensor(dt, n), tg = g_in.tensor(dt, n), tr = rs_out.tensor(dt, n),
              tc = bc.tensor(dt, n);
    std::vector<PL_Tensor> gouts, rins;
    for (int q = 0; q < W_; ++q) {
      gouts.push_back(g_out.tensor(dt, n, q * n));
      rins.push_back(rs_in.tensor(dt, n, q * n));
    }
    {
      pl::Work w1 = pg.allreduce_async(ta, PL_REDUCE_SUM);
      pl::Work w2 = pg.allreduce_async(tb, PL_REDUCE_MAX);
      pl::Work w3 = pg.allgather_async(tg, gouts);
      pl::Work w4 = pg.reduce_scatter_async(rins, tr, PL_REDUCE_SUM);
      pl::Work w5 = pg.broadcast_async(tc, root);
      w5.wait();
      const auto limit = Clock::now() + std::chrono::seconds(60);
      while (!w4.test()) {
        if (Clock::now() > limit) throw std::runtime_error("Work::test() never reported reduce_scatter done in 60 s");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      w3.wait();
      w2.wait();
      w1.wait();
      if (!w1.test()) throw std::runtime_error("Work::test() is false after wait() returned");
    }
    for (Buffer* x : {&a, &b, &g_out, &rs_out, &bc}) x->download();
    check<T>(a, 0, n, [&](int64_t i) { return expected<T>(PL_REDUCE_SUM, W_, i); });
    check<T>(b, 0, n, [&](int64_t i) { return expected<T>(PL_REDUCE_MAX, W_, i); });
    for (int q = 0; q < W_; ++q)
      check<T>(g_out, q * n, n, [&, q](int64_t i) { return input<T>(Kind::Plain, q, W_, i); });
    check<T>(rs_out, 0, n, [&](int64_t i) { return expected<T>(PL_REDUCE_SUM, W_, r_ * n + i); });
    check<T>(bc, 0, n, bcast);
  }

  Ctx& ctx_;
  const int r_, W_;
  std::vector<SizeSpec> sizes_;
  std::set<std::string> ops_, p2p_modes_;
  std::vector<PL_DType> dtypes_;
  std::vector<PL_ReduceOp> rops_;
  std::vector<int> roots_;
  std::string case_ = "setup";
  int64_t checks_ = 0, failed_ = 0;
  int tag_ = 0;
  bool gather_total_ = false, verbose_ = false;
  Clock::time_point case_start_ = Clock::now();
};

}  // namespace

int run_matrix(Ctx& ctx) {
  try {
    Matrix m(ctx);
    return m.run();
  } catch (const std::invalid_argument& e) {
    std::cout << ctx.tag() << e.what() << std::endl;
    return 2;
  }
}

}  // namespace pgtest
