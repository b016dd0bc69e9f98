// reduce_scatter: a ring over gloo unbound buffers (this gloo has no functional reduce-scatter).
// Rank R ends with the reduction over all ranks of their inputs[R]; the per-rank element counts
// may differ between chunks (they are part of the op's descriptor, so every rank must pass the
// same ones).  World W: W-1 steps; in step s rank R receives chunk (R-s-2) mod W from rank R-1,
// combines it with its own input for that chunk, and forwards the partial result to rank R+1 in
// the next step; the last chunk received is its own, combined straight into the output.  The
// output may be inputs[R] itself.  Device tensors are staged through host memory (staging.hpp),
// which keeps that aliasing.
//
// PIPELINE.  A step's chunk moves in segments of kSegmentBytes, every receive posted up front:
// segment k is combined (and forwarded) while segment k+1 is still on the wire, as gloo's ring
// allreduce does.  Sending each step's chunk whole, and combining only after all of it had
// arrived, left the transfer and the arithmetic back to back: the reduce-scatter of half a bucket
// took longer than Gloo's allreduce of the whole bucket (bench/sharded_steps.py).
// PIECES.  The chunks go round the ring in pieces of at most kScatterPieceBytes each, so the scratch
// (two halves: the step's receives, and the previous step's results still being forwarded) is
// 2 x kScatterPieceBytes at most whatever the tensor's size, allocated once per call and below glibc's
// mmap ceiling (see allreduce.cpp's "64 MiB cliff": a fresh 64 MiB scratch per call paid a page
// fault per 4 KiB).  A piece costs one more pass of the ring's latency (W-1 hops of tens of
// microseconds on loopback) against milliseconds of data.
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "gloo_pg.hpp"
#include "reduce.hpp"

namespace plrt::gloo_pg {

using plugin::fail;

namespace {

constexpr size_t kScatterPieceBytes = size_t{8} << 20;
constexpr size_t kSegmentBytes = size_t{1} << 20;

void wait_done(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("reduce_scatter: ") + what + " was interrupted");
}

// One ring pass over elements [at, at + piece) of every chunk (clipped to its count).
class Ring {
 public:
  Ring(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, const std::vector<const uint8_t*>& in,
       const std::vector<size_t>& counts, size_t es, pg::ReduceFn fn, uint8_t* output)
      : ctx_(ctx), oc_(oc), in_(in), counts_(counts), es_(es), fn_(fn), output_(output) {
    world_ = ctx->size;
    rank_ = ctx->rank;
    next_ = (rank_ + 1) % world_;
    prev_ = (rank_ + world_ - 1) % world_;
    piece_ = std::max<size_t>(1, kScatterPieceBytes / es);
    segment_ = std::max<size_t>(1, kSegmentBytes / es);
    const size_t most = *std::max_element(counts.begin(), counts.end());
    half_bytes_ = std::min(most, piece_) * es;
    scratch_.reset(new uint8_t[2 * half_bytes_]);  // uninitialised: every byte used is received first
    base_slot_ = (kReduceScatterSlotPrefix << 56) | (static_cast<uint64_t>(oc.tag) << 24);
    pieces_ = (most + piece_ - 1) / piece_;
  }

  void run() {
    for (int h = 0; h < 2; ++h)
      half_[h] = own(ctx_->createUnboundBuffer(scratch_.get() + h * half_bytes_, half_bytes_));
    // Step 0 sends this rank's own input for chunk R-1, unreduced.
    const size_t first = chunk_at(-1);
    if (counts_[first] > 0)
      first_ = own(ctx_->createUnboundBuffer(const_cast<uint8_t*>(in_[first]), counts_[first] * es_));
    for (size_t p = 0; p < pieces_; ++p) run_piece(p * piece_);
    for (int h = 0; h < 2; ++h) drain_sends(h);
    for (; first_sends_ > 0; --first_sends_) wait_done(first_->waitSend(oc_.remaining()), "a send");
  }

 private:
  // Chunk (R + d) mod W.
  size_t chunk_at(int d) const { return static_cast<size_t>(((rank_ + d) % world_ + 2 * world_) % world_); }
  size_t length(size_t chunk, size_t at) const {
    return counts_[chunk] > at ? std::min(piece_, counts_[chunk] - at) : 0;
  }
  uint64_t slot(int step) const { return base_slot_ + static_cast<uint64_t>(step); }
  void drain_sends(int h) {
    for (; sends_[h] > 0; --sends_[h]) wait_done(half_[h]->waitSend(oc_.remaining()), "a send");
  }

  void run_piece(size_t at) {
    const size_t first = chunk_at(-1);
    for (size_t k = 0, n = length(first, at); k < n; k += segment_) {
      first_->send(next_, slot(0), (at + k) * es_, std::min(segment_, n - k) * es_);
      ++first_sends_;
    }
    for (int s = 0; s + 1 < world_; ++s) {
      const int h = s & 1;
      const size_t chunk = chunk_at(-s - 2);
      const size_t n = length(chunk, at);
      const bool last = s + 2 == world_;  // chunk == this rank's: combine into the output
      if (n == 0) continue;
      drain_sends(h);  // the half's previous results have left
      for (size_t k = 0; k < n; k += segment_) half_[h]->recv(prev_, slot(s), k * es_, std::min(segment_, n - k) * es_);
      uint8_t* got = scratch_.get() + h * half_bytes_;
      const uint8_t* mine = in_[chunk] + at * es_;
      for (size_t k = 0; k < n; k += segment_) {
        const size_t m = std::min(segment_, n - k);
        wait_done(half_[h]->waitRecv(oc_.remaining()), "a receive");
        if (last) {
          fn_(output_ + (at + k) * es_, got + k * es_, mine + k * es_, m);
        } else {
          fn_(got + k * es_, got + k * es_, mine + k * es_, m);
          half_[h]->send(next_, slot(s + 1), k * es_, m * es_);
          ++sends_[h];
        }
      }
    }
  }

  const std::shared_ptr<gloo::Context>& ctx_;
  const pg::OpContext& oc_;
  const std::vector<const uint8_t*>& in_;
  const std::vector<size_t>& counts_;
  size_t es_;
  pg::ReduceFn fn_;
  uint8_t* output_;
  int world_ = 1, rank_ = 0, next_ = 0, prev_ = 0;
  size_t piece_ = 1, segment_ = 1, half_bytes_ = 0, pieces_ = 0;
  uint64_t base_slot_ = 0;
  std::unique_ptr<uint8_t[]> scratch_;
  // Declared after the scratch they point into: destroyed first, under buffers_mutex() (gloo_pg.hpp).
  OwnedBuffer half_[2], first_;
  size_t sends_[2] = {0, 0}, first_sends_ = 0;  // sends posted and not yet waited for
};

void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc,
                         const std::vector<const uint8_t*>& in, const std::vector<size_t>& counts, size_t es,
                         pg::ReduceFn fn, void* output) {
  gloo_call([&] { Ring(ctx, oc, in, counts, es, fn, static_cast<uint8_t*>(output)).run(); });
}

// The host algorithm: `ins` and `o` are in host memory.
void reduce_scatter_host(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc,
                         const std::vector<PL_Tensor>& ins, const PL_Tensor& o, PL_ReduceOp op,
                         const std::vector<size_t>& counts) {
  const size_t world = ins.size();
  const size_t n_out = static_cast<size_t>(o.numel);
  if (world == 1) {
    if (n_out > 0 && o.data != ins[0].data) std::memmove(o.data, ins[0].data, bytes_of(o));
    return;
  }
  const int64_t divisor = static_cast<int64_t>(world);
  if (op == PL_REDUCE_AVG && pg::avg_widens(o.dtype)) {  // exact: an int64 sum, then the mean
    std::vector<std::vector<int64_t>> wide(world);
    std::vector<const uint8_t*> ptrs(world);
    for (size_t r = 0; r < world; ++r) {
      wide[r].resize(std::max<size_t>(counts[r], 1));
      pg::widen_to_i64(ins[r].data, o.dtype, wide[r].data(), counts[r]);
      ptrs[r] = reinterpret_cast<const uint8_t*>(wide[r].data());
    }
    std::vector<int64_t> result(std::max<size_t>(n_out, 1));
    ring_reduce_scatter(ctx, oc, ptrs, counts, sizeof(int64_t), pg::reduce_fn(PL_REDUCE_SUM, PL_I64), result.data());
    pg::narrow_avg_from_i64(result.data(), divisor, o.dtype, o.data, n_out);
    return;
  }
  std::vector<const uint8_t*> ptrs(world);
  for (size_t r = 0; r < world; ++r) ptrs[r] = static_cast<const uint8_t*>(ins[r].data);
  ring_reduce_scatter(ctx, oc, ptrs, counts, pl_dtype_size(o.dtype), pg::reduce_fn(op, o.dtype), o.data);
  if (op == PL_REDUCE_AVG) pg::divide_inplace(o.data, o.dtype, n_out, divisor);
}

}  // namespace

PL_Error* reduce_scatter(PL_ProcessGroup* pg, const PL_Tensor* inputs, size_t num_inputs, PL_Tensor* output,
                         PL_ReduceOp op, PL_Work** out) noexcept {
  return entry(pg, "reduce_scatter", [&] {
    const std::string w = where("reduce_scatter");
    pg::OpDesc d = pg::reduce_scatter_args(inputs, num_inputs, output, op, shape(pg), w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();

    const std::vector<PL_Tensor> arg_ins(inputs, inputs + num_inputs);
    const PL_Tensor arg_out = *output;
    const auto ctx = pg->context;
    pg->core->run(
        std::move(d),
        [arg_ins, arg_out, op, ctx, staging = pg->staging](const pg::OpContext& oc) {
          std::vector<size_t> counts;
          size_t total = 0;
          for (const auto& t : arg_ins) {
            counts.push_back(static_cast<size_t>(t.numel));
            total += counts.back();
          }
          if (arg_ins.size() > 1 && total == 0) return tagged_barrier(ctx, oc);
          std::vector<PL_Tensor> ins = arg_ins;  // the staged copies point at host memory
          PL_Tensor o = arg_out;
          StagedOp staged(staging);
          for (auto& t : ins) staged.add(&t, StagedOp::kRead);
          staged.add(&o, StagedOp::kWrite);
          staged.stage_in();
          reduce_scatter_host(ctx, oc, ins, o, op, counts);
          staged.stage_out();
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
