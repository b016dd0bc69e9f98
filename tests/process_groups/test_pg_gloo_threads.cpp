// The gloo process group, one thread per rank: every collective x every dtype x sizes 0, 1, 7,
// 1000 at 2 and 3 ranks (and 1), checked element by element against an answer computed here;
// integer AVG; send/recv; barrier; async work.  Failures (timeouts, mismatches, abort, argument
// errors) are in test_pg_gloo_failures.cpp.
#include <gmock/gmock.h>

#include "gloo_threads.hpp"

using namespace gloo_threads;
using ::testing::HasSubstr;

namespace {

// Checks every element of `got` against want(i); reports the first difference only.
template <class Want>
void expect_all(PL_DType dt, const void* got, size_t n, Want want, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    auto r = same_element(dt, got, i, want(i));
    if (!r) {
      ADD_FAILURE() << what << ": " << r.message();
      return;
    }
  }
}

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, AllreduceEveryOpDtypeAndSize) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    for (PL_DType dt : all_dtypes())
      for (PL_ReduceOp op : all_reduce_ops())
        for (size_t n : sizes()) {
          Buf b(dt, n);
          for (size_t i = 0; i < n; ++i) b.set(i, value(dt, r.rank, i, op));
          PL_Tensor t = b.tensor();
          r.pg->allreduce(t, op);
          expect_all(
              dt, b.bytes.data(), n, [&](size_t i) { return reduced(dt, op, r.world, i); },
              "rank " + std::to_string(r.rank) + " " + case_name("allreduce", dt, n, op));
        }
  });
}

// Both of gloo's allreduce algorithms (option allreduce; auto takes bcube for 2 and 4 ranks below 128 MiB, ring
// for 3), each forced at every world size, including bcube at a world that is no power of two.
TEST_P(GlooWorld, AllreduceWithEachAlgorithm) {
  for (const char* algo : {"ring", "bcube"}) {
    GroupOptions go;
    go.options = {{"allreduce", algo}};
    Job job(GetParam());
    job.run(
        [&](Rank& r) {
          for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
            Buf b(PL_F32, n);
            for (size_t i = 0; i < n; ++i) b.set(i, value(PL_F32, r.rank, i, PL_REDUCE_SUM));
            PL_Tensor t = b.tensor();
            r.pg->allreduce(t, PL_REDUCE_SUM);
            expect_all(
                PL_F32, b.bytes.data(), n, [&](size_t i) { return reduced(PL_F32, PL_REDUCE_SUM, r.world, i); },
                std::string(algo) + " rank " + std::to_string(r.rank) + " " +
                    case_name("allreduce", PL_F32, n, PL_REDUCE_SUM));
          }
        },
        go);
  }
}

// Allreduces larger than the plugin's 16 MiB pieces (allreduce.cpp: bcube runs piece by piece, and
// so does the int64 temporary of an integer AVG with either algorithm): every element, across the
// piece boundaries and the short last piece, is the full reduction.
TEST_P(GlooWorld, AllreduceAcrossPiecesWithEachAlgorithm) {
  for (const char* algo : {"ring", "bcube"}) {
    GroupOptions go;
    go.options = {{"allreduce", algo}};
    Job job(GetParam());
    job.run(
        [&](Rank& r) {
          const size_t piece_f32 = (size_t{16} << 20) / 4, piece_i64 = (size_t{16} << 20) / 8;
          struct Case {
            PL_DType dt;
            PL_ReduceOp op;
            size_t n;
          };
          for (const Case& c :
               {Case{PL_F32, PL_REDUCE_SUM, 2 * piece_f32 + 3}, Case{PL_I32, PL_REDUCE_AVG, piece_i64 + 5},
                Case{PL_U8, PL_REDUCE_AVG, 2 * piece_i64 + 1}}) {
            Buf b(c.dt, c.n);
            for (size_t i = 0; i < c.n; ++i) b.set(i, value(c.dt, r.rank, i, c.op));
            PL_Tensor t = b.tensor();
            r.pg->allreduce(t, c.op);
            expect_all(
                c.dt, b.bytes.data(), c.n, [&](size_t i) { return reduced(c.dt, c.op, r.world, i); },
                std::string(algo) + " rank " + std::to_string(r.rank) + " " + case_name("allreduce", c.dt, c.n, c.op));
          }
        },
        go);
  }
}

TEST_P(GlooWorld, BroadcastFromFirstAndLastRank) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    for (int root : {0, r.world - 1})
      for (PL_DType dt : all_dtypes())
        for (size_t n : sizes()) {
          Buf b(dt, n);
          for (size_t i = 0; i < n; ++i) b.set(i, r.rank == root ? value(dt, root, i) : 5);
          PL_Tensor t = b.tensor();
          r.pg->broadcast(t, root);
          expect_all(
              dt, b.bytes.data(), n, [&](size_t i) { return value(dt, root, i); },
              "rank " + std::to_string(r.rank) + " root " + std::to_string(root) + " " + case_name("broadcast", dt, n));
        }
  });
}

// Per-rank counts: n each, or n + rank (rank 0 may then send nothing while others do).
std::vector<size_t> counts_for(size_t n, int world, bool per_rank) {
  std::vector<size_t> c;
  for (int q = 0; q < world; ++q) c.push_back(per_rank ? n + static_cast<size_t>(q) * (n % 2 ? 2 : 1) : n);
  return c;
}

TEST_P(GlooWorld, AllgatherEqualAndPerRankSizesContiguousSeparateAndInPlace) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    for (bool per_rank : {false, true})
      for (int layout = 0; layout < 3; ++layout)  // 0: one buffer, 1: separate buffers, 2: in place
        for (PL_DType dt : all_dtypes())
          for (size_t n : sizes()) {
            const auto c = counts_for(n, r.world, per_rank);
            size_t total = 0;
            std::vector<size_t> off;
            for (size_t x : c) off.push_back(total), total += x;
            Buf whole(dt, total);
            std::vector<Buf> parts;
            for (size_t x : c) parts.emplace_back(dt, x);
            std::vector<PL_Tensor> outs;
            for (int q = 0; q < r.world; ++q)
              outs.push_back(layout == 1 ? parts[q].tensor() : whole.tensor_at(off[q], c[q]));
            Buf in(dt, c[r.rank]);
            for (size_t i = 0; i < c[r.rank]; ++i) in.set(i, value(dt, r.rank, i));
            PL_Tensor input = in.tensor();
            if (layout == 2) {  // the input is this rank's slot of the output
              for (size_t i = 0; i < c[r.rank]; ++i) whole.set(off[r.rank] + i, value(dt, r.rank, i));
              input = outs[r.rank];
            }
            r.pg->allgather(input, outs);
            const std::string what = "rank " + std::to_string(r.rank) + " layout " + std::to_string(layout) +
                                     (per_rank ? " per-rank " : " equal ") + case_name("allgather", dt, n);
            for (int q = 0; q < r.world; ++q) {
              const void* got = layout == 1 ? parts[q].bytes.data() : whole.bytes.data() + off[q] * pl_dtype_size(dt);
              expect_all(
                  dt, got, c[q], [&](size_t i) { return value(dt, q, i); }, what + " from rank " + std::to_string(q));
            }
          }
  });
}

TEST_P(GlooWorld, ReduceScatterEveryOpDtypeSizeAndPerRankSizes) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    for (bool per_rank : {false, true})
      for (PL_ReduceOp op : all_reduce_ops())
        for (PL_DType dt : all_dtypes())
          for (size_t n : sizes()) {
            const auto c = counts_for(n, r.world, per_rank);
            // inputs[j][i] on rank q = value(dt, q, i + 5j): every chunk differs.
            std::vector<Buf> ins;
            std::vector<PL_Tensor> inputs;
            for (int j = 0; j < r.world; ++j) {
              ins.emplace_back(dt, c[j]);
              for (size_t i = 0; i < c[j]; ++i) ins.back().set(i, value(dt, r.rank, i + 5 * j, op));
            }
            for (auto& b : ins) inputs.push_back(b.tensor());
            Buf out(dt, c[r.rank]);
            PL_Tensor output = out.tensor();
            r.pg->reduce_scatter(inputs, output, op);
            expect_all(
                dt, out.bytes.data(), c[r.rank],
                [&](size_t i) { return reduced(dt, op, r.world, i + 5 * static_cast<size_t>(r.rank)); },
                "rank " + std::to_string(r.rank) + (per_rank ? " per-rank " : " equal ") +
                    case_name("reduce_scatter", dt, n, op));
          }
    // In place: the output is inputs[rank] itself.
    Buf a(PL_F32, 7 * static_cast<size_t>(r.world));
    for (size_t i = 0; i < a.n; ++i) a.set(i, value(PL_F32, r.rank, i));
    std::vector<PL_Tensor> inputs;
    for (int j = 0; j < r.world; ++j) inputs.push_back(a.tensor_at(7 * static_cast<size_t>(j), 7));
    PL_Tensor output = inputs[r.rank];
    r.pg->reduce_scatter(inputs, output, PL_REDUCE_SUM);
    expect_all(
        PL_F32, output.data, 7, [&](size_t i) { return reduced(PL_F32, PL_REDUCE_SUM, r.world, i + 7 * r.rank); },
        "in-place reduce_scatter");
  });
}

// Chunks longer than the ring's piece (8 MiB) and segment (1 MiB), of different lengths (one empty
// at 3 ranks), in place: every piece and segment boundary of reduce_scatter.cpp's pipeline is
// crossed, and every element is checked.
TEST_P(GlooWorld, ReduceScatterPipelinesLargeUnequalChunksInPlace) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    std::vector<size_t> c{(size_t{5} << 20) + 3, (size_t{1} << 18) + 1};  // f32: 2.5 pieces; 1 segment + 1
    if (r.world == 3) c.insert(c.begin() + 1, 0);
    size_t total = 0;
    for (size_t n : c) total += n;
    for (PL_ReduceOp op : {PL_REDUCE_SUM, PL_REDUCE_AVG}) {
      Buf a(PL_F32, total);
      for (size_t i = 0; i < total; ++i) a.set(i, value(PL_F32, r.rank, i, op));
      std::vector<PL_Tensor> inputs;
      size_t mine = 0;
      for (size_t j = 0, at = 0; j < c.size(); at += c[j], ++j) {
        if (static_cast<int>(j) == r.rank) mine = at;
        inputs.push_back(a.tensor_at(at, c[j]));
      }
      PL_Tensor output = inputs[static_cast<size_t>(r.rank)];
      r.pg->reduce_scatter(inputs, output, op);
      expect_all(
          PL_F32, output.data, c[static_cast<size_t>(r.rank)],
          [&](size_t i) { return reduced(PL_F32, op, r.world, mine + i); },
          "rank " + std::to_string(r.rank) + " " + case_name("reduce_scatter", PL_F32, c[r.rank], op));
    }
  });
}

TEST_P(GlooWorld, AvgOnIntegersIsTheExactMeanRoundedTowardZero) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    const int w = r.world;
    struct Case {
      PL_DType dt;
      double base, step;  // rank q holds base - q * step (+ i)
    };
    // int32 and uint8 sums overflow their type (the mean does not); int64 and negative means
    // round toward zero.
    for (const Case& k : {Case{PL_I32, 2'000'000'000.0, 3}, Case{PL_I32, -2'000'000'000.0, -5}, Case{PL_U8, 250, 1},
                          Case{PL_I64, -5, 1}, Case{PL_I32, -7, 2}})
      for (size_t n : sizes()) {
        Buf b(k.dt, n), rs_out(k.dt, n);
        auto v = [&](int q, size_t i) { return k.base - q * k.step + static_cast<double>(i % 4); };
        for (size_t i = 0; i < n; ++i) b.set(i, v(r.rank, i));
        auto want = [&](size_t i) {
          int64_t s = 0;
          for (int q = 0; q < w; ++q) s += static_cast<int64_t>(v(q, i));
          return static_cast<double>(s / w);
        };
        std::vector<PL_Tensor> ins(static_cast<size_t>(w), b.tensor());  // every chunk: this rank's values
        PL_Tensor out = rs_out.tensor();
        r.pg->reduce_scatter(ins, out, PL_REDUCE_AVG);
        PL_Tensor t = b.tensor();
        r.pg->allreduce(t, PL_REDUCE_AVG);
        const std::string what =
            "rank " + std::to_string(r.rank) + " " + case_name("avg", k.dt, n) + " base " + std::to_string(k.base);
        expect_all(k.dt, b.bytes.data(), n, want, "allreduce " + what);
        expect_all(k.dt, rs_out.bytes.data(), n, want, "reduce_scatter " + what);
      }
  });
}

TEST_P(GlooWorld, SendRecvAroundTheRingEveryDtypeAndSize) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    const int next = (r.rank + 1) % r.world, prev = (r.rank + r.world - 1) % r.world;
    for (PL_DType dt : all_dtypes())
      for (size_t n : sizes()) {
        Buf out(dt, n), in(dt, n);
        for (size_t i = 0; i < n; ++i) out.set(i, value(dt, r.rank, i));
        const int tag = static_cast<int>(dt) * 100 + static_cast<int>(n % 97);
        pl::Work w = r.pg->send_async(out.tensor(), next, tag);
        PL_Tensor t = in.tensor();
        r.pg->recv(t, prev, tag);
        w.wait();
        expect_all(
            dt, in.bytes.data(), n, [&](size_t i) { return value(dt, prev, i); },
            "rank " + std::to_string(r.rank) + " " + case_name("recv", dt, n));
      }
  });
}

// Send/recv are posted in issue order but complete on their own: a recv posted before a send
// does not hold the send up.
TEST_P(GlooWorld, PostedTransfersCompleteOutOfIssueOrder) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    const int last = r.world - 1;
    Buf a(PL_I32, 5), b(PL_I32, 5), c(PL_F32, 9);
    for (size_t i = 0; i < 5; ++i) a.set(i, 10 * r.rank + static_cast<double>(i));
    for (size_t i = 0; i < 9; ++i) c.set(i, 1);
    PL_Tensor ta = a.tensor(), tb = b.tensor(), tc = c.tensor();
    if (r.rank == 0) {
      pl::Work in = r.pg->recv_async(tb, last, 1);  // posted first, satisfied last
      r.pg->send(ta, last, 2);                      // completes while the recv is still pending
      EXPECT_FALSE(in.test());
      r.pg->allreduce(tc, PL_REDUCE_SUM);  // collectives go on meanwhile
      in.wait(10s);
      expect_all(
          PL_I32, b.bytes.data(), 5, [&](size_t i) { return 10.0 * last + static_cast<double>(i); }, "tag 1");
    } else if (r.rank == last) {
      r.pg->recv(tb, 0, 2);
      r.pg->allreduce(tc, PL_REDUCE_SUM);
      r.pg->send(ta, 0, 1);
      expect_all(
          PL_I32, b.bytes.data(), 5, [&](size_t i) { return static_cast<double>(i); }, "tag 2");
    } else {
      r.pg->allreduce(tc, PL_REDUCE_SUM);
    }
    expect_all(
        PL_F32, c.bytes.data(), 9, [&](size_t) { return static_cast<double>(r.world); }, "allreduce");
    r.pg->barrier();
  });
}

TEST_P(GlooWorld, BarrierHoldsEveryRankUntilAllArrive) {
  Job job(GetParam());
  std::atomic<int> arrived{0};
  job.run([&](Rank& r) {
    for (int k = 1; k <= 5; ++k) {
      if (r.rank == k % r.world) std::this_thread::sleep_for(20ms);  // one late rank each round
      arrived.fetch_add(1);
      r.pg->barrier();
      EXPECT_GE(arrived.load(), k * r.world) << "rank " << r.rank << " left barrier " << k << " early";
    }
  });
}

TEST_P(GlooWorld, AsyncWorkCompletesInIssueOrderWithBlockingCallsBehindIt) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    std::vector<Buf> bufs;
    for (int k = 0; k < 4; ++k) {
      bufs.emplace_back(PL_F32, 1000);
      for (size_t i = 0; i < 1000; ++i) bufs.back().set(i, value(PL_F32, r.rank, i + static_cast<size_t>(k)));
    }
    std::vector<PL_Tensor> ts;
    for (auto& b : bufs) ts.push_back(b.tensor());
    std::vector<pl::Work> works;
    for (int k = 0; k < 3; ++k) works.push_back(r.pg->allreduce_async(ts[k], PL_REDUCE_SUM));
    r.pg->allreduce(ts[3], PL_REDUCE_MAX);  // issued while async work is queued: runs after it
    EXPECT_TRUE(works[2].test()) << "the blocking call returned before the work issued ahead of it";
    for (auto& w : works) w.wait(10s);
    for (int k = 0; k < 4; ++k)
      expect_all(
          PL_F32, bufs[k].bytes.data(), 1000,
          [&](size_t i) { return reduced(PL_F32, k < 3 ? PL_REDUCE_SUM : PL_REDUCE_MAX, r.world, i + k); },
          "async op " + std::to_string(k));
    // A handle destroyed without a wait still completes its op (work_destroy waits for it).
    { pl::Work w = r.pg->broadcast_async(ts[0], 0); }
    r.pg->barrier();
  });
}

TEST_P(GlooWorld, WorkWaitTimesOutWhileAPeerIsLateThenCompletes) {
  Job job(GetParam());
  job.run([&](Rank& r) {
    Buf b(PL_I64, 7);
    for (size_t i = 0; i < 7; ++i) b.set(i, value(PL_I64, r.rank, i));
    PL_Tensor t = b.tensor();
    if (r.rank == r.world - 1) std::this_thread::sleep_for(600ms);
    pl::Work w = r.pg->allreduce_async(t, PL_REDUCE_SUM);
    if (r.rank == 0) {
      EXPECT_FALSE(w.test());
      try {
        w.wait(50ms);
        ADD_FAILURE() << "wait(50 ms) returned while the last rank was 600 ms late";
      } catch (const pl::Error& e) {
        EXPECT_EQ(e.code(), PL_ERR_TIMEOUT);
        EXPECT_THAT(e.what(), HasSubstr("gloo allreduce #1 (sum, int64, 7 elements) is not complete after 50 ms"));
      }
    }
    w.wait(10s);
    EXPECT_TRUE(w.test());
    expect_all(
        PL_I64, b.bytes.data(), 7, [&](size_t i) { return reduced(PL_I64, PL_REDUCE_SUM, r.world, i); }, "late");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld, ::testing::Values(2, 3),
                         [](const auto& info) { return "W" + std::to_string(info.param); });

TEST(GlooSingleRank, EveryOpWorksWithoutATransport) {
  Job job(1);
  job.run([&](Rank& r) {
    for (PL_DType dt : all_dtypes()) {
      Buf b(dt, 7);
      for (size_t i = 0; i < 7; ++i) b.set(i, value(dt, 0, i));
      PL_Tensor t = b.tensor();
      r.pg->allreduce(t, PL_REDUCE_AVG);
      r.pg->broadcast(t, 0);
      expect_all(
          dt, b.bytes.data(), 7, [&](size_t i) { return value(dt, 0, i); }, case_name("w1", dt, 7));
      Buf g(dt, 7), o(dt, 7);
      std::vector<PL_Tensor> outs{g.tensor()};
      r.pg->allgather(t, outs);
      std::vector<PL_Tensor> ins{t};
      PL_Tensor ot = o.tensor();
      r.pg->reduce_scatter(ins, ot, PL_REDUCE_SUM);
      expect_all(
          dt, g.bytes.data(), 7, [&](size_t i) { return value(dt, 0, i); }, case_name("w1 allgather", dt, 7));
      expect_all(
          dt, o.bytes.data(), 7, [&](size_t i) { return value(dt, 0, i); }, case_name("w1 rs", dt, 7));
    }
    r.pg->barrier();
  });
}

TEST(GlooGroups, TwoGroupsOfOneNameOnOneStoreInTurnAndTwoNamesAtOnce) {
  Job job(2);
  for (int round = 0; round < 2; ++round)  // the second group of a name gets fresh store keys
    job.run([&](Rank& r) {
      Buf b(PL_F32, 3);
      for (size_t i = 0; i < 3; ++i) b.set(i, r.rank + 1);
      PL_Tensor t = b.tensor();
      r.pg->allreduce(t, PL_REDUCE_SUM);
      expect_all(
          PL_F32, b.bytes.data(), 3, [&](size_t) { return 3.0; }, "round " + std::to_string(round));
      pl::ProcessGroupOptions po;
      po.rank = r.rank;
      po.world_size = r.world;
      po.group_name = "second";
      po.timeout = 20s;
      pl::ProcessGroup other(*r.rt, "gloo", *r.store, po);
      other.allreduce(t, PL_REDUCE_SUM);
      r.pg->allreduce(t, PL_REDUCE_SUM);
      expect_all(
          PL_F32, b.bytes.data(), 3, [&](size_t) { return 12.0; }, "two groups");
    });
}

TEST(GlooGroups, TheIfaceAndHostnameOptionsPickTheLoopback) {
  for (const auto& opt : std::vector<std::pair<std::string, std::string>>{{"iface", "lo"}, {"hostname", "127.0.0.1"}}) {
    Job job(2);
    GroupOptions go;
    go.options = {opt, {"probe_ms", "0"}};
    job.run(
        [&](Rank& r) {
          Buf b(PL_F64, 5);
          for (size_t i = 0; i < 5; ++i) b.set(i, r.rank + 0.5);
          PL_Tensor t = b.tensor();
          r.pg->allreduce(t, PL_REDUCE_SUM);
          expect_all(
              PL_F64, b.bytes.data(), 5, [&](size_t) { return 2.0; }, opt.first);
        },
        go);
  }
}

}  // namespace
