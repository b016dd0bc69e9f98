// The gloo process group when things go wrong, one thread per rank: a missing rank (timeout naming
// the op, its number and the rank), mismatched collectives (reported on every rank, alike),
// abort from another thread, the group unusable after a failure, and argument errors.  Every case
// uses short timeouts so that a regression fails instead of hanging.
#include <gmock/gmock.h>

#include <csignal>

#include "gloo_threads.hpp"

using namespace gloo_threads;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

void f32_allreduce(Rank& r, size_t n) {
  Buf b(PL_F32, n);
  for (size_t i = 0; i < n; ++i) b.set(i, 1);
  PL_Tensor t = b.tensor();
  r.pg->allreduce(t, PL_REDUCE_SUM);
}

TEST(GlooTimeout, AMissingRankIsNamedWithTheOpAndItsNumberThenTheGroupFailsAtOnce) {
  Job job(3);
  Latch done;
  std::atomic<int> failed{0};
  std::vector<Caught> got(3);
  GroupOptions go;
  go.timeout = 1500ms;
  job.run(
      [&](Rank& r) {
        f32_allreduce(r, 7);  // #1 and #2 succeed
        f32_allreduce(r, 7);
        if (r.rank == 2) {  // never calls #3; stays in the group until the others have failed
          EXPECT_TRUE(done.wait(20s));
          return;
        }
        got[r.rank] = expect_error([&] { f32_allreduce(r, 7); });
        // Every later call fails at once, repeating the cause.
        const Caught again = expect_error([&] { r.pg->barrier(); });
        EXPECT_EQ(again.code, PL_ERR_TIMEOUT);
        EXPECT_THAT(again.message, StartsWith("gloo group 'default' is unusable after an earlier failure: "));
        EXPECT_THAT(again.message, HasSubstr(got[r.rank].message));
        EXPECT_LT(again.ms, 100);
        Buf b(PL_F32, 2);
        PL_Tensor t = b.tensor();
        const Caught async = expect_error([&] { r.pg->allreduce_async(t, PL_REDUCE_SUM); });
        EXPECT_EQ(async.message, again.message);
        if (failed.fetch_add(1) + 1 == 2) done.open();
      },
      go);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_TIMEOUT) << "rank " << q;
    EXPECT_EQ(got[q].message,
              "gloo allreduce #3 (sum, float32, 7 elements) timed out after 1500 ms: rank 2 never arrived "
              "(ranks 0, 1 were waiting)")
        << "rank " << q;
    EXPECT_GE(got[q].ms, 1400) << "rank " << q;
    EXPECT_LT(got[q].ms, 1500 + 3000) << "rank " << q;
  }
}

// Two ranks call different things at #2; both must report the same mismatch, within seconds.
void expect_mismatch(const std::function<void(Rank&)>& rank0, const std::function<void(Rank&)>& rank1,
                     const std::string& message) {
  Job job(2);
  GroupOptions go;
  go.timeout = 15s;
  go.options = {{"probe_ms", "100"}};
  std::vector<Caught> got(2), again(2);
  job.run(
      [&](Rank& r) {
        r.pg->barrier();  // #1
        got[r.rank] = expect_error([&] { (r.rank == 0 ? rank0 : rank1)(r); });
        again[r.rank] = expect_error([&] { r.pg->barrier(); });
      },
      go);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_RUNTIME) << "rank " << q;
    EXPECT_EQ(got[q].message, message) << "rank " << q;
    EXPECT_LT(got[q].ms, 3000) << "rank " << q;
    EXPECT_EQ(again[q].message, "gloo group 'default' is unusable after an earlier failure: " + message);
    EXPECT_LT(again[q].ms, 100) << "rank " << q;
  }
}

TEST(GlooJobEnded, AnOpWaitingOnAnEndedProcessFailsWithinSecondsNamingIt) {
  // plrun records a worker's end in PL_STORE_JOB_ENDED_KEY; a collective still waiting for it fails
  // at its next probe (about a second), every rank with the same message, not at the timeout.
  Job job(3);
  Latch done;
  std::atomic<int> failed{0};
  std::vector<Caught> got(3);
  GroupOptions go;
  go.timeout = 60s;
  job.run(
      [&](Rank& r) {
        f32_allreduce(r, 5);
        if (r.rank == 2) {  // "exits": never calls #2; the launcher says so
          r.store->set(PL_STORE_JOB_ENDED_KEY, "rank 2 (pid 4242, node 0) exited with code 0");
          EXPECT_TRUE(done.wait(20s));
          return;
        }
        got[r.rank] = expect_error([&] { f32_allreduce(r, 5); });
        if (failed.fetch_add(1) + 1 == 2) done.open();
      },
      go);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].code, PL_ERR_RUNTIME) << "rank " << q;
    EXPECT_EQ(got[q].message,
              "gloo allreduce #2 (sum, float32, 5 elements) failed: rank 2 (pid 4242, node 0) exited with code 0")
        << "rank " << q;
    EXPECT_LT(got[q].ms, 5000) << "rank " << q;
  }
}

TEST(GlooMismatch, AllgatherAgainstAllreduce) {
  expect_mismatch(
      [](Rank& r) {
        Buf in(PL_F32, 1), out(PL_F32, 2);
        std::vector<PL_Tensor> outs{out.tensor_at(0, 1), out.tensor_at(1, 1)};
        r.pg->allgather(in.tensor(), outs);
      },
      [](Rank& r) { f32_allreduce(r, 4); },
      "mismatched collectives at #2: rank 0 called allgather(float32, 1 element from each rank); "
      "rank 1 called allreduce(sum, float32, 4 elements)");
}

TEST(GlooMismatch, SameOpDifferentSizes) {
  expect_mismatch([](Rank& r) { f32_allreduce(r, 4); }, [](Rank& r) { f32_allreduce(r, 5); },
                  "mismatched collectives at #2: rank 0 called allreduce(sum, float32, 4 elements); "
                  "rank 1 called allreduce(sum, float32, 5 elements)");
}

TEST(GlooMismatch, SameOpDifferentDtypes) {
  expect_mismatch([](Rank& r) { f32_allreduce(r, 4); },
                  [](Rank& r) {
                    Buf b(PL_I32, 4);
                    PL_Tensor t = b.tensor();
                    r.pg->allreduce(t, PL_REDUCE_SUM);
                  },
                  "mismatched collectives at #2: rank 0 called allreduce(sum, float32, 4 elements); "
                  "rank 1 called allreduce(sum, int32, 4 elements)");
}

TEST(GlooMismatch, ThreeRanksTwoAgreeOneDiffersEveryRankReportsIt) {
  Job job(3);
  GroupOptions go;
  go.timeout = 15s;
  go.options = {{"probe_ms", "100"}};
  std::vector<Caught> got(3);
  job.run(
      [&](Rank& r) {
        got[r.rank] = expect_error([&] {
          Buf b(PL_F64, 3);
          PL_Tensor t = b.tensor();
          if (r.rank == 1)
            r.pg->broadcast(t, 0);
          else
            r.pg->allreduce(t, PL_REDUCE_MAX);
        });
      },
      go);
  for (int q = 0; q < 3; ++q) {
    EXPECT_EQ(got[q].message,
              "mismatched collectives at #1: ranks 0, 2 called allreduce(max, float64, 3 elements); "
              "rank 1 called broadcast(float64, 3 elements, root 0)")
        << "rank " << q;
    EXPECT_LT(got[q].ms, 3000) << "rank " << q;
  }
}

TEST(GlooAbort, AbortFromAnotherThreadUnblocksTheOpAndThePeerLearnsWhy) {
  Job job(2);
  Latch rank0_failed;
  GroupOptions go;
  go.timeout = 15s;
  std::vector<Caught> got(2);
  job.run(
      [&](Rank& r) {
        if (r.rank == 0) {
          std::thread aborter([&] {
            std::this_thread::sleep_for(300ms);
            r.pg->abort();
          });
          got[0] = expect_error([&] { f32_allreduce(r, 7); });  // rank 1 never joins it
          aborter.join();
          rank0_failed.open();
          const Caught again = expect_error([&] { r.pg->barrier(); });
          EXPECT_EQ(again.message, "gloo group 'default' is unusable after an earlier failure: aborted by the caller");
          EXPECT_LT(again.ms, 100);
          return;
        }
        EXPECT_TRUE(rank0_failed.wait(20s));
        got[1] = expect_error([&] { f32_allreduce(r, 7); });
      },
      go);
  EXPECT_EQ(got[0].code, PL_ERR_RUNTIME);
  EXPECT_EQ(got[0].message, "gloo allreduce #1 (sum, float32, 7 elements) failed: aborted by the caller");
  EXPECT_GE(got[0].ms, 250);
  EXPECT_LT(got[0].ms, 2000);
  EXPECT_EQ(got[1].code, PL_ERR_RUNTIME);
  EXPECT_EQ(got[1].message,
            "gloo allreduce #1 (sum, float32, 7 elements) failed: rank 0 aborted its group (aborted by the caller)");
  EXPECT_LT(got[1].ms, 3000);
}

TEST(GlooAbort, AbortFailsQueuedWorkToo) {
  Job job(2);
  Latch finished;
  GroupOptions go;
  go.timeout = 15s;
  job.run(
      [&](Rank& r) {
        if (r.rank == 1) {  // never calls: rank 0's work stays pending until the abort
          EXPECT_TRUE(finished.wait(20s));
          return;
        }
        Buf a(PL_F32, 5), b(PL_F32, 5);
        PL_Tensor ta = a.tensor(), tb = b.tensor();
        pl::Work w1 = r.pg->allreduce_async(ta, PL_REDUCE_SUM);
        pl::Work w2 = r.pg->allreduce_async(tb, PL_REDUCE_SUM);
        std::this_thread::sleep_for(200ms);
        r.pg->abort();
        const Caught c1 = expect_error([&] { w1.wait(5s); });
        const Caught c2 = expect_error([&] { w2.wait(5s); });
        EXPECT_EQ(c1.message, "gloo allreduce #1 (sum, float32, 5 elements) failed: aborted by the caller");
        EXPECT_EQ(c2.message, "gloo group 'default' is unusable after an earlier failure: aborted by the caller");
        finished.open();
      },
      go);
}

TEST(GlooTimeout, SetTimeoutAppliesToTheNextOp) {
  Job job(2);
  Latch finished;
  job.run([&](Rank& r) {  // the group's timeout is 20 s
    if (r.rank == 1) {
      EXPECT_TRUE(finished.wait(20s));
      return;
    }
    r.pg->set_timeout(800ms);
    const Caught c = expect_error([&] { r.pg->barrier(); });
    EXPECT_EQ(c.code, PL_ERR_TIMEOUT);
    EXPECT_EQ(c.message, "gloo barrier #1 timed out after 800 ms: rank 1 never arrived (rank 0 was waiting)");
    EXPECT_GE(c.ms, 750);
    EXPECT_LT(c.ms, 800 + 2500);
    finished.open();
  });
}

TEST(GlooTimeout, SendWithoutARecvTimesOutNamingThePeer) {
  Job job(2);
  Latch finished;
  GroupOptions go;
  go.timeout = 1000ms;
  job.run(
      [&](Rank& r) {
        if (r.rank == 1) {
          EXPECT_TRUE(finished.wait(20s));
          return;
        }
        Buf b(PL_U8, 3);
        const Caught c = expect_error([&] { r.pg->send(b.tensor(), 1, 42); });
        EXPECT_EQ(c.code, PL_ERR_TIMEOUT);
        EXPECT_EQ(c.message,
                  "gloo send to rank 1 (tag 42, uint8, 3 elements) timed out after 1000 ms: rank 1 posted no "
                  "matching recv (same tag, dtype and element count)");
        EXPECT_LT(c.ms, 3000);
        finished.open();
      },
      go);
}

TEST(GlooAbort, ARecvFromAPeerThatAbortedSaysSo) {
  Job job(2);
  Latch aborted, finished;
  GroupOptions go;
  go.timeout = 15s;
  job.run(
      [&](Rank& r) {
        // Both ranks finish connecting first: a group aborted while its peer is still inside
        // create() fails that create instead ("Connection closed by peer").
        r.pg->barrier();
        if (r.rank == 1) {
          r.pg->abort();
          aborted.open();
          EXPECT_TRUE(finished.wait(20s));
          return;
        }
        EXPECT_TRUE(aborted.wait(20s));
        Buf b(PL_F32, 4);
        PL_Tensor t = b.tensor();
        const Caught c = expect_error([&] { r.pg->recv(t, 1, 3); });
        EXPECT_EQ(c.code, PL_ERR_RUNTIME);
        EXPECT_EQ(c.message,
                  "gloo recv from rank 1 (tag 3, float32, 4 elements) failed: rank 1 aborted its group "
                  "(aborted by the caller)");
        EXPECT_LT(c.ms, 2000);
        finished.open();
      },
      go);
}

// Gloo writes without MSG_NOSIGNAL: with SIGPIPE at its default action, a peer's exit would kill
// this process instead of failing the collective.  A group of two or more ignores it (as Python
// does), unless the host installed a handler of its own.
void on_sigpipe(int) {}

TEST(GlooSigpipe, ADefaultSigpipeIsIgnoredOnceAGroupExists) {
  std::signal(SIGPIPE, SIG_DFL);
  Job job(2);
  job.run([&](Rank& r) { f32_allreduce(r, 7); });
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

TEST(GlooSigpipe, AHandlerOfTheHostIsLeftAlone) {
  std::signal(SIGPIPE, on_sigpipe);
  Job job(2);
  job.run([&](Rank& r) { f32_allreduce(r, 7); });
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &on_sigpipe);
  std::signal(SIGPIPE, SIG_DFL);
}

}  // namespace
