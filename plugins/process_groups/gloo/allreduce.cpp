// allreduce: gloo::allreduce (ring or bcube, option allreduce) with this plugin's reduce kernels
// (reduce.hpp).  AVG sums, then divides by the world size; uint8 and int32 sum in an int64
// temporary so that the mean is exact (see reduce.hpp).  A device tensor is staged through host
// memory (staging.hpp).
//
// PIECES.  Gloo's bcube allocates a scratch buffer as large as the whole tensor on every call
// (new[] in gloo::allreduce's bcube).  glibc serves an allocation of 32 MiB or more (its dynamic
// mmap threshold stops rising at 32 MiB) with a fresh mmap each time, so every call above that
// size paid a page fault per 4 KiB of scratch the peer's data landed in, plus the munmap: at 2
// ranks the busbw fell from 1.6 GB/s at 16 MiB to 0.84 GB/s at 32 and 64 MiB (direct Gloo bcube
// alike), the "64 MiB cliff"; with the threshold raised (GLIBC_TUNABLES) the same calls ran at
// 1.2-1.4 GB/s.  So a bcube allreduce runs in pieces of at most kAllreducePieceBytes, one gloo call each,
// whose scratch malloc recycles; so does the int64 temporary of an integer AVG (ring or bcube),
// which is as large as the piece, not the tensor.  Ring needs no pieces: its scratch is two 1 MiB
// segments.  A piece costs one more round of gloo's latency (tens of microseconds on loopback)
// against milliseconds of data per piece.
#include <gloo/allreduce.h>

#include <algorithm>
#include <vector>

#include "gloo_pg.hpp"
#include "reduce.hpp"

namespace plrt::gloo_pg {

namespace {

// Below glibc's 32 MiB ceiling with room to spare, and large enough that a piece's data takes far
// longer than its extra round (measured at 2 ranks under load: 2 and 4 MiB pieces were slower than
// 8 and 16 MiB ones, whose rounds cost a scheduler tick when a peer is descheduled).
constexpr size_t kAllreducePieceBytes = size_t{16} << 20;

void gloo_allreduce(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, void* data, size_t n,
                    size_t elem_size, pg::ReduceFn fn, bool bcube) {
  gloo_call([&] {
    Guarded<gloo::AllreduceOptions> guarded_opts(ctx);  // destroyed under buffers_mutex()
    auto& opts = *guarded_opts;
    if (bcube) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    with_element(elem_size, [&](auto t) { opts.setOutput(static_cast<decltype(t)*>(data), n); });
    opts.setReduceFunction(fn);
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::allreduce(opts);
  });
}

// The host algorithm, in place in `t` (host memory), piece by piece where that avoids a fresh
// allocation per call (above).
void reduce_host(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, const PL_Tensor& t, PL_ReduceOp op,
                 int world, bool bcube) {
  const size_t n = static_cast<size_t>(t.numel);
  const size_t es = pl_dtype_size(t.dtype);
  auto* base = static_cast<uint8_t*>(t.data);
  if (op == PL_REDUCE_AVG && pg::avg_widens(t.dtype)) {
    const size_t piece = std::max<size_t>(1, kAllreducePieceBytes / sizeof(int64_t));
    std::vector<int64_t> wide(std::min(n, piece));
    for (size_t at = 0; at < n; at += piece) {
      const size_t m = std::min(piece, n - at);
      pg::widen_to_i64(base + at * es, t.dtype, wide.data(), m);
      gloo_allreduce(ctx, oc, wide.data(), m, sizeof(int64_t), pg::reduce_fn(PL_REDUCE_SUM, PL_I64), bcube);
      pg::narrow_avg_from_i64(wide.data(), world, t.dtype, base + at * es, m);
    }
    return;
  }
  const size_t piece = bcube ? std::max<size_t>(1, kAllreducePieceBytes / es) : n;
  for (size_t at = 0; at < n; at += piece)
    gloo_allreduce(ctx, oc, base + at * es, std::min(piece, n - at), es, pg::reduce_fn(op, t.dtype), bcube);
  if (op == PL_REDUCE_AVG) pg::divide_inplace(t.data, t.dtype, n, world);
}

}  // namespace

bool use_bcube(PL_ProcessGroup::Algorithm algorithm, int world, size_t bytes) {
  if (algorithm != PL_ProcessGroup::Algorithm::kAuto) return algorithm == PL_ProcessGroup::Algorithm::kBcube;
  return (world & (world - 1)) == 0 && bytes < kAutoRingFromBytes;
}

PL_Error* allreduce(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out) noexcept {
  return entry(pg, "allreduce", [&] {
    const std::string w = where("allreduce");
    pg::OpDesc d = pg::allreduce_args(tensor, op, w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();

    const PL_Tensor arg = *tensor;
    const int world = pg->world;
    const auto ctx = pg->context;
    const bool bcube = use_bcube(pg->allreduce, world, bytes_of(*tensor));
    pg->core->run(
        std::move(d),
        [arg, op, world, ctx, bcube, staging = pg->staging](const pg::OpContext& oc) {
          if (world == 1) return;  // the reduction of one rank (and its mean) is its own value
          if (arg.numel == 0) return tagged_barrier(ctx, oc);
          PL_Tensor t = arg;
          StagedOp staged(staging);
          staged.add(&t, StagedOp::kReadWrite);
          staged.stage_in();
          reduce_host(ctx, oc, t, op, world, bcube);
          staged.stage_out();
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
