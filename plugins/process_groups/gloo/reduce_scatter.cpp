// reduce_scatter: a ring over gloo unbound buffers (this gloo has no functional reduce-scatter).
// Rank R ends with the reduction over all ranks of their inputs[R]; the per-rank element counts
// may differ between chunks (they are part of the op's descriptor, so every rank must pass the
// same ones).  World W: W-1 steps; in step s rank R receives chunk (R-s-2) mod W from rank R-1,
// combines it with its own input for that chunk, and forwards the partial result to rank R+1 in
// the next step; the last chunk received is its own, combined straight into the output.  The
// output may be inputs[R] itself.  Device tensors are staged through host memory (staging.hpp),
// which keeps that aliasing.
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gloo_pg.hpp"
#include "reduce.hpp"

namespace plrt::gloo_pg {

using plugin::fail;

namespace {

void wait_done(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("reduce_scatter: ") + what + " was interrupted");
}

void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc,
                         const std::vector<const uint8_t*>& in, const std::vector<size_t>& counts, size_t es,
                         pg::ReduceFn fn, void* output) {
  const int world = ctx->size, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  const size_t half = *std::max_element(counts.begin(), counts.end()) * es;
  std::vector<uint8_t> scratch(2 * half);
  const uint64_t base = (kReduceScatterSlotPrefix << 56) | (static_cast<uint64_t>(oc.tag) << 24);
  gloo_call([&] {
    OwnedBuffer sbuf = own(ctx->createUnboundBuffer(scratch.data(), scratch.size()));
    OwnedBuffer first;  // both destroyed under buffers_mutex() (gloo_pg.hpp)
    for (int s = 0; s + 1 < world; ++s) {
      const size_t send_chunk = static_cast<size_t>((rank - s - 1 + 2 * world) % world);
      const size_t recv_chunk = static_cast<size_t>((rank - s - 2 + 2 * world) % world);
      const uint64_t slot = base + static_cast<uint64_t>(s);
      const size_t recv_off = static_cast<size_t>(s & 1) * half;
      sbuf->recv(prev, slot, recv_off, counts[recv_chunk] * es);
      gloo::transport::UnboundBuffer* sender = sbuf.get();
      if (s == 0) {  // our own input for the chunk, unreduced
        first = own(ctx->createUnboundBuffer(const_cast<uint8_t*>(in[send_chunk]), counts[send_chunk] * es));
        first->send(next, slot, 0, counts[send_chunk] * es);
        sender = first.get();
      } else {  // the partial result received in the previous step
        sbuf->send(next, slot, static_cast<size_t>((s - 1) & 1) * half, counts[send_chunk] * es);
      }
      wait_done(sbuf->waitRecv(oc.remaining()), "a receive");
      uint8_t* got = scratch.data() + recv_off;
      if (s + 2 == world)
        fn(output, got, in[recv_chunk], counts[recv_chunk]);  // recv_chunk == rank
      else
        fn(got, got, in[recv_chunk], counts[recv_chunk]);
      wait_done(sender->waitSend(oc.remaining()), "a send");
    }
  });
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
