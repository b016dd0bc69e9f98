// The gloo process group on device tensors, staged through host memory: 2 and 3 ranks (threads) on
// one device, every op, a few dtypes and sizes 0, 1, 7, 1000 and 1Mi, checked element by element
// after the results are read back from the device.  Each case runs on the emulated device
// (everywhere) and on the cuda accelerator (skipped, with the reason, without a GPU).
#include <gmock/gmock.h>

#include "staged_ranks.hpp"

using namespace staged;
using gloo_threads::case_name;
using gloo_threads::reduced;
using gloo_threads::same_element;
using gloo_threads::value;

namespace {

const std::vector<PL_DType>& dtypes() {  // float, half, integer (AVG widens), byte
  static const std::vector<PL_DType> d = {PL_F32, PL_BF16, PL_I32, PL_U8};
  return d;
}

const std::vector<size_t>& sizes() {
  static const std::vector<size_t> s = {0, 1, 7, 1000, size_t{1} << 20};
  return s;
}

// Checks every element against want(i); reports the first difference only.
template <class Want>
void expect_all(const Buf& got, size_t first, size_t n, Want want, const std::string& what) {
  const uint8_t* base = got.bytes.data() + first * pl_dtype_size(got.dt);
  for (size_t i = 0; i < n; ++i) {
    auto r = same_element(got.dt, base, i, want(i));
    if (!r) {
      ADD_FAILURE() << what << ": " << r.message();
      return;
    }
  }
}

struct Param {
  Kind kind;
  int world;
};
std::ostream& operator<<(std::ostream& os, const Param& p) { return os << kind_name(p.kind) << " W=" << p.world; }

class Staged : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (GetParam().kind == Kind::kCuda) {
      const std::string why = cuda_unavailable();
      if (!why.empty()) GTEST_SKIP() << why;
    }
  }
  // Runs body on every rank; the emulated device is made fresh for the test.
  void run(const std::function<void(Rank&)>& body) {
    emulated::Device emu;
    Job job(GetParam().world, GetParam().kind, &emu);
    job.run(body);
    if (GetParam().kind == Kind::kEmulated) {
      EXPECT_EQ(emu.pinned_outstanding(), 0) << "page-locked blocks left after the groups were destroyed";
    }
  }
};

TEST_P(Staged, AllreduceEveryOpDtypeAndSize) {
  run([&](Rank& r) {
    for (PL_DType dt : dtypes())
      for (PL_ReduceOp op : gloo_threads::all_reduce_ops())
        for (size_t n : sizes()) {
          r.dev->reset();
          DevBuf b(*r.dev, dt, n);
          for (size_t i = 0; i < n; ++i) b.host.set(i, value(dt, r.rank, i, op));
          b.upload();
          r.pg->allreduce(b.tensor(), op);
          expect_all(
              b.download(), 0, n, [&](size_t i) { return reduced(dt, op, r.world, i); },
              "rank " + std::to_string(r.rank) + " " + case_name("allreduce", dt, n, op));
        }
  });
}

TEST_P(Staged, BroadcastFromFirstAndLastRank) {
  run([&](Rank& r) {
    for (int root : {0, r.world - 1})
      for (PL_DType dt : dtypes())
        for (size_t n : sizes()) {
          r.dev->reset();
          DevBuf b(*r.dev, dt, n);
          for (size_t i = 0; i < n; ++i) b.host.set(i, r.rank == root ? value(dt, root, i) : 5);
          b.upload();
          r.pg->broadcast(b.tensor(), root);
          expect_all(
              b.download(), 0, n, [&](size_t i) { return value(dt, root, i); },
              "rank " + std::to_string(r.rank) + " root " + std::to_string(root) + " " + case_name("broadcast", dt, n));
        }
  });
}

// Outputs as views of one device buffer, as separate buffers, in place (the input is this rank's
// view of the output), and mixed: a host input gathered into device outputs.
TEST_P(Staged, AllgatherViewsSeparateInPlaceAndMixed) {
  run([&](Rank& r) {
    const int W = r.world;
    for (int layout = 0; layout < 4; ++layout)
      for (PL_DType dt : dtypes())
        for (size_t n : sizes()) {
          r.dev->reset();
          DevBuf whole(*r.dev, dt, n * static_cast<size_t>(W));
          std::vector<std::unique_ptr<DevBuf>> parts;
          std::vector<PL_Tensor> outs;
          for (int q = 0; q < W; ++q) {
            parts.push_back(std::make_unique<DevBuf>(*r.dev, dt, n));
            outs.push_back(layout == 1 ? parts.back()->tensor() : whole.tensor_at(n * static_cast<size_t>(q), n));
          }
          DevBuf in(*r.dev, dt, n);
          for (size_t i = 0; i < n; ++i) in.host.set(i, value(dt, r.rank, i));
          in.upload();
          PL_Tensor input = in.tensor();
          if (layout == 2) {  // in place
            for (size_t i = 0; i < n; ++i) whole.host.set(n * static_cast<size_t>(r.rank) + i, value(dt, r.rank, i));
            whole.upload();
            input = outs[static_cast<size_t>(r.rank)];
          }
          if (layout == 3) input = in.host.tensor();  // host memory, not staged
          r.pg->allgather(input, outs);
          const std::string what = "rank " + std::to_string(r.rank) + " layout " + std::to_string(layout) + " " +
                                   case_name("allgather", dt, n);
          if (layout != 1) whole.download();
          for (int q = 0; q < W; ++q) {
            const Buf& got = layout == 1 ? parts[static_cast<size_t>(q)]->download() : whole.host;
            expect_all(
                got, layout == 1 ? 0 : n * static_cast<size_t>(q), n, [&](size_t i) { return value(dt, q, i); },
                what + " from rank " + std::to_string(q));
          }
        }
  });
}

TEST_P(Staged, ReduceScatterEveryOpDtypeSizeAndInPlace) {
  run([&](Rank& r) {
    const size_t W = static_cast<size_t>(r.world);
    for (bool in_place : {false, true})
      for (PL_ReduceOp op : gloo_threads::all_reduce_ops())
        for (PL_DType dt : dtypes())
          for (size_t n : sizes()) {
            if (in_place && (op != PL_REDUCE_SUM && op != PL_REDUCE_AVG)) continue;
            r.dev->reset();
            // inputs[j][i] on rank q = value(dt, q, i + 5j): every chunk differs.
            DevBuf a(*r.dev, dt, n * W);
            for (size_t j = 0; j < W; ++j)
              for (size_t i = 0; i < n; ++i) a.host.set(n * j + i, value(dt, r.rank, i + 5 * j, op));
            a.upload();
            std::vector<PL_Tensor> ins;
            for (size_t j = 0; j < W; ++j) ins.push_back(a.tensor_at(n * j, n));
            DevBuf o(*r.dev, dt, n);
            PL_Tensor out = in_place ? ins[static_cast<size_t>(r.rank)] : o.tensor();
            r.pg->reduce_scatter(ins, out, op);
            const Buf& got = in_place ? a.download() : o.download();
            expect_all(
                got, in_place ? n * static_cast<size_t>(r.rank) : 0, n,
                [&](size_t i) { return reduced(dt, op, r.world, i + 5 * static_cast<size_t>(r.rank)); },
                "rank " + std::to_string(r.rank) + (in_place ? " in place " : " ") +
                    case_name("reduce_scatter", dt, n, op));
          }
  });
}

// all_to_all on device tensors: equal chunks, then per-rank counts (rank q sends n + q + j elements
// to rank j, none to itself when n is 0); then the counts case on CPU tensors, which the group
// takes unstaged.  Element k of the chunk from rank q to rank j is value(dt, q, 7j + k).
TEST_P(Staged, AllToAllEqualChunksAndPerRankCounts) {
  run([&](Rank& r) {
    const int W = r.world;
    for (PL_DType dt : dtypes())
      for (size_t n : sizes()) {
        for (int mode = 0; mode < 3; ++mode) {  // equal chunks, counts, counts on the host
          const bool uneven = mode > 0, on_host = mode == 2;
          r.dev->reset();
          auto count = [&](int q, int j) { return uneven ? (n == 0 && q == j ? 0 : n + q + j) : n; };
          std::vector<int64_t> send, recv;
          size_t n_in = 0, n_out = 0;
          for (int j = 0; j < W; ++j) {
            send.push_back(static_cast<int64_t>(count(r.rank, j)));
            recv.push_back(static_cast<int64_t>(count(j, r.rank)));
            n_in += count(r.rank, j);
            n_out += count(j, r.rank);
          }
          DevBuf in(*r.dev, dt, n_in), out(*r.dev, dt, n_out);
          for (int j = 0, at = 0; j < W; ++j)
            for (size_t k = 0; k < count(r.rank, j); ++k) in.host.set(at++, value(dt, r.rank, 7 * j + k));
          in.upload();
          Buf& host_in = in.host;
          Buf host_out(dt, n_out);
          if (on_host)
            r.pg->all_to_all(host_in.tensor(), host_out.tensor(), send, recv);
          else if (uneven)
            r.pg->all_to_all(in.tensor(), out.tensor(), send, recv);
          else
            r.pg->all_to_all(in.tensor(), out.tensor());
          const Buf& got = on_host ? host_out : out.download();
          for (int q = 0, at = 0; q < W; at += static_cast<int>(count(q, r.rank)), ++q)
            expect_all(
                got, static_cast<size_t>(at), count(q, r.rank),
                [&](size_t k) { return value(dt, q, 7 * static_cast<size_t>(r.rank) + k); },
                "rank " + std::to_string(r.rank) + " from rank " + std::to_string(q) +
                    (on_host  ? " host counts "
                     : uneven ? " counts "
                              : " ") +
                    case_name("all_to_all", dt, n));
        }
      }
  });
}

// Around the ring: an async send, then a blocking recv; then an async recv posted before the send
// that satisfies it (its copy back to the device happens when its transfer completes).
TEST_P(Staged, SendRecvAroundTheRing) {
  run([&](Rank& r) {
    const int next = (r.rank + 1) % r.world, prev = (r.rank + r.world - 1) % r.world;
    for (PL_DType dt : dtypes())
      for (size_t n : sizes()) {
        r.dev->reset();
        DevBuf out(*r.dev, dt, n), in(*r.dev, dt, n), in2(*r.dev, dt, n);
        for (size_t i = 0; i < n; ++i) out.host.set(i, value(dt, r.rank, i));
        out.upload();
        const int tag = static_cast<int>(dt) * 100 + static_cast<int>(n % 97);
        pl::Work s = r.pg->send_async(out.tensor(), next, tag);
        r.pg->recv(in.tensor(), prev, tag);
        s.wait(20s);
        pl::Work got = r.pg->recv_async(in2.tensor(), prev, tag + 1);
        r.pg->send(out.tensor(), next, tag + 1);
        got.wait(20s);
        const std::string what = "rank " + std::to_string(r.rank) + " " + case_name("recv", dt, n);
        expect_all(
            in.download(), 0, n, [&](size_t i) { return value(dt, prev, i); }, what);
        expect_all(
            in2.download(), 0, n, [&](size_t i) { return value(dt, prev, i); }, what + " (async)");
      }
    r.pg->barrier();
  });
}

// Async ops on one device tensor run in issue order, each reading what the previous one wrote back;
// a host tensor goes through the same group unstaged.
TEST_P(Staged, AsyncWorkOnOneTensorInIssueOrderAndHostTensorsAlongside) {
  run([&](Rank& r) {
    const double W = r.world;
    DevBuf b(*r.dev, PL_F64, 1000);
    for (size_t i = 0; i < 1000; ++i) b.host.set(i, r.rank + 1.0 + static_cast<double>(i));
    b.upload();
    std::vector<pl::Work> works;
    for (int k = 0; k < 3; ++k) works.push_back(r.pg->allreduce_async(b.tensor(), PL_REDUCE_SUM));
    Buf h(PL_F32, 7);
    for (size_t i = 0; i < 7; ++i) h.set(i, r.rank);
    r.pg->allreduce(h.tensor(), PL_REDUCE_MAX);  // queued behind the three
    for (auto& w : works) w.wait(20s);
    // sum over ranks of (q + 1 + i), then times W twice
    expect_all(
        b.download(), 0, 1000, [&](size_t i) { return W * W * (W * (W + 1) / 2 + W * static_cast<double>(i)); },
        "three async allreduces");
    expect_all(
        h, 0, 7, [&](size_t) { return W - 1; }, "host tensor");
  });
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (Kind k : {Kind::kEmulated, Kind::kCuda})
    for (int w : {2, 3}) p.push_back({k, w});
  return p;
}

INSTANTIATE_TEST_SUITE_P(Ranks, Staged, ::testing::ValuesIn(params()), [](const auto& info) {
  return std::string(kind_name(info.param.kind)) + "_W" + std::to_string(info.param.world);
});

}  // namespace
