// all_to_all on the gloo process group, one thread per rank, at 2, 3 and 4 ranks: equal chunks and
// per-rank counts (zeros included) in every dtype against a reference computed here from the
// sender's formula; async work; every bad argument; peers that disagree on their counts (the
// same error on every rank, naming both counts, and the group still usable); a mismatch against
// allreduce; a rank that never calls (timeout); abort.
#include <gmock/gmock.h>

#include "gloo_threads.hpp"

using namespace gloo_threads;
using ::testing::HasSubstr;

namespace {

template <class F>
void expect_invalid(F&& f, const std::string& part) {
  const Caught c = expect_error(std::forward<F>(f));
  EXPECT_EQ(c.code, PL_ERR_INVALID_ARGUMENT) << c.message;
  EXPECT_THAT(c.message, HasSubstr(part));
}

// What rank `src` puts in element k of the chunk it sends to rank `dst`: distinct per (src, dst,
// k) within the dtype's exact range, so a chunk from the wrong rank or at the wrong offset shows.
double sent_value(PL_DType dt, int src, int dst, size_t k) {
  const int v = static_cast<int>((static_cast<size_t>(src) * 37 + static_cast<size_t>(dst) * 11 + k * 5) % 101);
  return dt == PL_U8 ? v : v - 50;
}

// Rank `rank`'s input: chunk j (counts[rank][j] elements) holds sent_value(rank, j, k).
Buf make_input(PL_DType dt, int rank, const std::vector<std::vector<int64_t>>& m) {
  size_t total = 0;
  for (int64_t c : m[rank]) total += static_cast<size_t>(c);
  Buf b(dt, total);
  size_t at = 0;
  for (size_t j = 0; j < m[rank].size(); ++j)
    for (size_t k = 0; k < static_cast<size_t>(m[rank][j]); ++k)
      b.set(at++, sent_value(dt, rank, static_cast<int>(j), k));
  return b;
}

// The reference: chunk i of rank `rank`'s output is what rank i sent it.
void expect_output(const Buf& out, int rank, const std::vector<std::vector<int64_t>>& m, const std::string& what) {
  size_t at = 0;
  for (size_t i = 0; i < m.size(); ++i)
    for (size_t k = 0; k < static_cast<size_t>(m[i][rank]); ++k, ++at)
      ASSERT_TRUE(same_element(out.dt, out.bytes.data(), at, sent_value(out.dt, static_cast<int>(i), rank, k)))
          << what << ", rank " << rank << ", chunk from rank " << i << ", element " << k;
}

std::vector<int64_t> column(const std::vector<std::vector<int64_t>>& m, int j) {
  std::vector<int64_t> c;
  for (const auto& row : m) c.push_back(row[static_cast<size_t>(j)]);
  return c;
}

size_t total(const std::vector<int64_t>& v) {
  size_t s = 0;
  for (int64_t c : v) s += static_cast<size_t>(c);
  return s;
}

class GlooAllToAll : public ::testing::TestWithParam<int> {};

TEST_P(GlooAllToAll, EqualChunksEveryDtypeAndSize) {
  const int world = GetParam();
  Job job(world);
  job.run([&](Rank& r) {
    for (PL_DType dt : all_dtypes())
      for (size_t chunk : {size_t{0}, size_t{1}, size_t{5}, size_t{300}}) {
        const std::vector<std::vector<int64_t>> m(world, std::vector<int64_t>(world, static_cast<int64_t>(chunk)));
        Buf in = make_input(dt, r.rank, m);
        Buf out(dt, chunk * world);
        PL_Tensor ti = in.tensor(), to = out.tensor();
        r.pg->all_to_all(ti, to);
        expect_output(out, r.rank, m, case_name("all_to_all", dt, chunk));
      }
  });
}

// counts[i][j]: what rank i sends to rank j; zeros on and off the diagonal, and a rank that sends
// nothing at all (the last one).
std::vector<std::vector<int64_t>> uneven(int world) {
  std::vector<std::vector<int64_t>> m(world, std::vector<int64_t>(world));
  for (int i = 0; i < world; ++i)
    for (int j = 0; j < world; ++j) m[i][j] = i + 1 == world ? 0 : (i * 3 + j * 2 + 1) % 5;
  return m;
}

TEST_P(GlooAllToAll, PerRankCountsWithZerosEveryDtype) {
  const int world = GetParam();
  Job job(world);
  const auto m = uneven(world);
  job.run([&](Rank& r) {
    for (PL_DType dt : all_dtypes()) {
      Buf in = make_input(dt, r.rank, m);
      const auto recv = column(m, r.rank);
      Buf out(dt, total(recv));
      PL_Tensor ti = in.tensor(), to = out.tensor();
      r.pg->all_to_all(ti, to, m[r.rank], recv);
      expect_output(out, r.rank, m, std::string("uneven ") + pl_dtype_name(dt));
    }
    // Every count zero: a valid call that moves nothing.
    const std::vector<int64_t> zeros(world, 0);
    Buf none_in(PL_F32, 0), none_out(PL_F32, 0);
    PL_Tensor ti = none_in.tensor(), to = none_out.tensor();
    ti.data = nullptr;
    to.data = nullptr;
    r.pg->all_to_all(ti, to, zeros, zeros);
    r.pg->all_to_all(ti, to);  // equal chunks of nothing
  });
}

TEST_P(GlooAllToAll, AsyncWorkKeepsItsCountsAndCompletesInOrder) {
  const int world = GetParam();
  Job job(world);
  const auto m = uneven(world);
  job.run([&](Rank& r) {
    Buf in = make_input(PL_I64, r.rank, m);
    Buf out(PL_I64, total(column(m, r.rank)));
    PL_Tensor ti = in.tensor(), to = out.tensor();
    pl::Work w;
    {
      const std::vector<int64_t> send = m[r.rank], recv = column(m, r.rank);  // gone before the wait
      w = r.pg->all_to_all_async(ti, to, send, recv);
    }
    Buf b(PL_F32, 3);
    for (size_t i = 0; i < 3; ++i) b.set(i, 1);
    PL_Tensor tb = b.tensor();
    pl::Work w2 = r.pg->allreduce_async(tb, PL_REDUCE_SUM);
    w.wait(10s);
    w2.wait(10s);
    expect_output(out, r.rank, m, "async");
    EXPECT_EQ(b.at(0), world);
  });
}

TEST_P(GlooAllToAll, PeersThatDisagreeOnTheirCountsFailAlikeNamingBothAndTheGroupStaysUsable) {
  const int world = GetParam();
  Job job(world);
  std::vector<Caught> got(world);
  job.run([&](Rank& r) {
    std::vector<std::vector<int64_t>> m(world, std::vector<int64_t>(world, 2));
    std::vector<int64_t> send = m[r.rank], recv = column(m, r.rank);
    if (r.rank == 1) recv[0] = 3;  // expects 3 from rank 0, which sends 2
    Buf in(PL_F32, total(send)), out(PL_F32, total(recv));
    PL_Tensor ti = in.tensor(), to = out.tensor();
    got[r.rank] = expect_error([&] { r.pg->all_to_all(ti, to, send, recv); });
    // Still usable: every rank left #1 at the same point.
    Buf b(PL_F32, 2);
    for (size_t i = 0; i < 2; ++i) b.set(i, 1);
    PL_Tensor tb = b.tensor();
    r.pg->allreduce(tb, PL_REDUCE_SUM);
    EXPECT_EQ(b.at(1), world);
  });
  for (int q = 0; q < world; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_INVALID_ARGUMENT) << "rank " << q;
    EXPECT_THAT(got[q].message,
                HasSubstr("ranks 0 and 1 disagree on their counts: rank 0 sends 2 elements to rank 1 (its "
                          "input_counts[1] = 2) but rank 1 expects 3 elements from rank 0 (its output_counts[0] = 3)"))
        << "rank " << q;
    EXPECT_THAT(got[q].message, ::testing::StartsWith("gloo all_to_all #1 (float32, sends ")) << "rank " << q;
    EXPECT_EQ(got[q].message.substr(got[q].message.find("ranks 0 and 1")),
              got[0].message.substr(got[0].message.find("ranks 0 and 1")));
    EXPECT_LT(got[q].ms, 3000) << "rank " << q;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooAllToAll, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(GlooAllToAllSingleRank, ItsOwnChunkWithoutATransport) {
  Job job(1);
  job.run([&](Rank& r) {
    const std::vector<std::vector<int64_t>> m{{6}};
    Buf in = make_input(PL_BF16, 0, m), out(PL_BF16, 6);
    PL_Tensor ti = in.tensor(), to = out.tensor();
    r.pg->all_to_all(ti, to);
    expect_output(out, 0, m, "one rank");
  });
}

TEST(GlooAllToAllArguments, EachBadArgumentIsNamedAndTheGroupStaysUsable) {
  Job job(2);
  job.run([&](Rank& r) {
    const std::string self = std::to_string(r.rank);
    Buf a(PL_F32, 4), b(PL_F32, 4), five(PL_F32, 5), ints(PL_I32, 4);
    PL_Tensor in = a.tensor(), out = b.tensor();
    PL_Tensor odd = five.tensor(), int_out = ints.tensor();
    expect_invalid([&] { r.pg->all_to_all(odd, out); },
                   "gloo all_to_all: input_counts is NULL (equal chunks) but input has 5 elements, which 2 ranks "
                   "cannot split evenly: pass input_counts, or a numel that is a multiple of 2");
    expect_invalid([&] { r.pg->all_to_all(in, odd); },
                   "gloo all_to_all: output_counts is NULL (equal chunks) but output has 5 elements");
    expect_invalid(
        [&] {
          r.pg->all_to_all(in, out, {5, -1}, {2, 2});
        },
        "gloo all_to_all: input_counts[1] is -1: element counts must be >= 0");
    expect_invalid(
        [&] {
          r.pg->all_to_all(in, out, {2, 2}, {-2, 6});
        },
        "gloo all_to_all: output_counts[0] is -2: element counts must be >= 0");
    expect_invalid(
        [&] {
          r.pg->all_to_all(in, out, {1, 2}, {2, 2});
        },
        "gloo all_to_all: input_counts add up to 3 but input has 4 elements: the 2 counts must add up "
        "to its numel");
    expect_invalid(
        [&] {
          r.pg->all_to_all(in, out, {2, 2}, {4, 1});
        },
        "gloo all_to_all: output_counts add up to more than the 4 elements of output (at output_counts[1] = 1)");
    expect_invalid(
        [&] {
          r.pg->all_to_all(in, out, {int64_t{1} << 62, int64_t{1} << 62}, {2, 2});
        },
        "gloo all_to_all: input_counts add up to more than the 4 elements of input (at input_counts[0]");
    std::vector<int64_t> own_in{2, 2}, own_out{2, 2};
    own_in[r.rank] = 3;
    own_in[1 - r.rank] = 1;
    expect_invalid([&] { r.pg->all_to_all(in, out, own_in, own_out); },
                   "gloo all_to_all: input_counts[" + self + "] is 3 but output_counts[" + self +
                       "] is 2: this rank (" + self + ") keeps its own chunk, so the two must be equal");
    expect_invalid([&] { r.pg->all_to_all(in, int_out); },
                   "gloo all_to_all: output is int32 but input is float32: every tensor of one call has one dtype");
    PL_Tensor cuda = b.tensor();
    cuda.device = {PL_DEVICE_CUDA, 0};
    expect_invalid([&] { r.pg->all_to_all(in, cuda); },
                   "gloo all_to_all: output is on cuda:0, but this gloo group takes CPU tensors only");
    // Overlap: the output is the input, or shares a part of it.
    Buf big(PL_F32, 8);
    PL_Tensor lo = big.tensor_at(0, 4), mid = big.tensor_at(2, 4), hi = big.tensor_at(4, 4);
    expect_invalid([&] { r.pg->all_to_all(in, in); },
                   "gloo all_to_all: input (16 bytes) and output (16 bytes) overlap: all_to_all is not in place");
    expect_invalid([&] { r.pg->all_to_all(lo, mid); }, "overlap");
    PL_Tensor null_in = a.tensor();
    null_in.data = nullptr;
    expect_invalid([&] { r.pg->all_to_all(null_in, out); }, "gloo all_to_all: input: data is NULL for 4 elements");
    PL_Tensor bad = a.tensor();
    bad.dtype = 42;
    expect_invalid([&] { r.pg->all_to_all(bad, out); }, "gloo all_to_all: input: unknown dtype 42");
    const PL_ProcessGroupApi* api = r.pg->api();
    PL_Error* e = api->all_to_all(r.pg->get(), nullptr, nullptr, &out, nullptr, nullptr);
    expect_invalid([&] { pl::check(e); }, "gloo all_to_all: input: tensor is NULL");

    // None of this consumed a sequence number or broke the group; an input and an output that
    // touch without overlapping are fine.
    for (size_t i = 0; i < 4; ++i) big.set(i, r.rank * 10 + i);
    r.pg->all_to_all(lo, hi);
    const std::vector<double> want =
        r.rank == 0 ? std::vector<double>{0, 1, 10, 11} : std::vector<double>{2, 3, 12, 13};
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(big.at(4 + i), want[i]) << "element " << i;
  });
}

TEST(GlooAllToAllFailures, AllreduceAgainstAllToAllIsAMismatchOnEveryRank) {
  Job job(2);
  GroupOptions go;
  go.timeout = 15s;
  go.options = {{"probe_ms", "100"}};
  std::vector<Caught> got(2);
  job.run(
      [&](Rank& r) {
        Buf in(PL_F32, 4), out(PL_F32, 4);
        PL_Tensor ti = in.tensor(), to = out.tensor();
        got[r.rank] = expect_error([&] {
          if (r.rank == 0)
            r.pg->all_to_all(ti, to);
          else
            r.pg->allreduce(ti, PL_REDUCE_SUM);
        });
      },
      go);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_RUNTIME) << "rank " << q;
    EXPECT_EQ(got[q].message,
              "mismatched collectives at #1: rank 0 called all_to_all(float32, 4 elements in equal chunks); "
              "rank 1 called allreduce(sum, float32, 4 elements)")
        << "rank " << q;
    EXPECT_LT(got[q].ms, 3000) << "rank " << q;
  }
}

TEST(GlooAllToAllFailures, EqualChunksOfDifferentSizesAreAMismatch) {
  Job job(2);
  GroupOptions go;
  go.timeout = 15s;
  go.options = {{"probe_ms", "100"}};
  std::vector<Caught> got(2);
  job.run(
      [&](Rank& r) {
        const size_t n = r.rank == 0 ? 4 : 6;
        Buf in(PL_I32, n), out(PL_I32, n);
        PL_Tensor ti = in.tensor(), to = out.tensor();
        got[r.rank] = expect_error([&] { r.pg->all_to_all(ti, to); });
      },
      go);
  for (int q = 0; q < 2; ++q)
    EXPECT_EQ(got[q].message,
              "mismatched collectives at #1: rank 0 called all_to_all(int32, 4 elements in equal chunks); "
              "rank 1 called all_to_all(int32, 6 elements in equal chunks)")
        << "rank " << q;
}

TEST(GlooAllToAllFailures, ARankThatNeverCallsIsNamedInTheTimeout) {
  Job job(3);
  Latch done;
  std::atomic<int> failed{0};
  std::vector<Caught> got(3);
  GroupOptions go;
  go.timeout = 1500ms;
  const auto m = uneven(3);
  job.run(
      [&](Rank& r) {
        if (r.rank == 2) {
          EXPECT_TRUE(done.wait(20s));
          return;
        }
        Buf in = make_input(PL_F64, r.rank, m), out(PL_F64, total(column(m, r.rank)));
        PL_Tensor ti = in.tensor(), to = out.tensor();
        got[r.rank] = expect_error([&] { r.pg->all_to_all(ti, to, m[r.rank], column(m, r.rank)); });
        if (failed.fetch_add(1) + 1 == 2) done.open();
      },
      go);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_TIMEOUT) << "rank " << q;
    EXPECT_THAT(got[q].message, ::testing::StartsWith("gloo all_to_all #1 (float64, sends ")) << "rank " << q;
    EXPECT_THAT(got[q].message, HasSubstr(" timed out after 1500 ms: rank 2 never arrived (ranks 0, 1 were waiting)"))
        << "rank " << q;
    EXPECT_GE(got[q].ms, 1400) << "rank " << q;
    EXPECT_LT(got[q].ms, 1500 + 3000) << "rank " << q;
  }
}

TEST(GlooAllToAllFailures, AbortEndsAPendingAllToAllAndThePeerLearnsWhy) {
  Job job(2);
  Latch rank0_failed;
  GroupOptions go;
  go.timeout = 15s;
  std::vector<Caught> got(2);
  job.run(
      [&](Rank& r) {
        Buf in(PL_U8, 6), out(PL_U8, 6);
        PL_Tensor ti = in.tensor(), to = out.tensor();
        if (r.rank == 0) {
          pl::Work w = r.pg->all_to_all_async(ti, to);  // rank 1 never joins it
          std::this_thread::sleep_for(300ms);
          r.pg->abort();
          got[0] = expect_error([&] { w.wait(5s); });
          rank0_failed.open();
          return;
        }
        EXPECT_TRUE(rank0_failed.wait(20s));
        got[1] = expect_error([&] { r.pg->all_to_all(ti, to); });
      },
      go);
  EXPECT_EQ(got[0].message, "gloo all_to_all #1 (uint8, 6 elements in equal chunks) failed: aborted by the caller");
  EXPECT_EQ(got[1].message,
            "gloo all_to_all #1 (uint8, 6 elements in equal chunks) failed: rank 0 aborted its group (aborted by the "
            "caller)");
  EXPECT_LT(got[1].ms, 3000);
}

}  // namespace
