// all_to_all: gloo::alltoallv (every rank posts its sends and receives to every peer at once, then
// waits for them), as torch.distributed.all_to_all_single: chunk j of the input goes to rank j,
// chunk i of the output comes from rank i.  Device tensors are staged through host memory
// (staging.hpp).
//
// PEER COUNTS.  With equal chunks (both count arrays NULL) every rank's numel is in the op's
// fingerprint, so ranks that pass different sizes never exchange data and the core names the
// mismatch.  Per-rank counts differ between ranks by design, so they stay out of the fingerprint
// and are checked here instead: before any data moves, the ranks allgather their count rows
// (input_counts then output_counts, 16 * world bytes from each rank, one gloo ring allgather of
// world - 1 steps on the op's tag) and every rank checks the whole world x world matrix, so a
// disagreement (rank i's input_counts[j] != rank j's output_counts[i]) is the same error on every
// rank (pg::AgreedFailure), naming both counts, and the group stays usable.  Cost, per call with
// counts: that allgather (world - 1 small messages in turn: on loopback some tens of microseconds)
// and a world^2 comparison; nothing for equal chunks.  A call whose counts are all zero on every
// rank moves nothing after the exchange; one with equal chunks of nothing is a tagged barrier.
#include <gloo/allgather.h>
#include <gloo/alltoallv.h>

#include <cstring>
#include <vector>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

namespace {

// Every rank's count row, rank by rank (pg::check_peer_counts reads it).
std::vector<int64_t> exchange_counts(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc,
                                     std::vector<int64_t> row) {
  std::vector<int64_t> table(row.size() * static_cast<size_t>(ctx->size));
  gloo_call([&] {
    Guarded<gloo::AllgatherOptions> guarded_opts(ctx);  // destroyed under buffers_mutex()
    auto& opts = *guarded_opts;
    opts.setInput(row.data(), row.size());
    opts.setOutput(table.data(), table.size());
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::allgather(opts);
  });
  return table;
}

// The host algorithm: `in` and `o` are in host memory.
void exchange_host(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, const PL_Tensor& in,
                   const PL_Tensor& o, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) {
  const size_t es = pl_dtype_size(in.dtype);
  if (!ctx) {  // a world of one rank: its own chunk
    if (send[0] > 0) std::memcpy(o.data, in.data, static_cast<size_t>(send[0]) * es);
    return;
  }
  // Gloo wants a buffer even for nothing: an empty tensor may have no data pointer.
  static uint8_t nothing[8];
  void* in_p = in.data ? const_cast<void*>(in.data) : nothing;
  void* out_p = o.data ? o.data : nothing;
  gloo_call([&] {
    Guarded<gloo::AlltoallvOptions> guarded_opts(ctx);  // destroyed under buffers_mutex()
    auto& opts = *guarded_opts;
    with_element(es, [&](auto e) {
      using T = decltype(e);
      opts.setInput(static_cast<T*>(in_p), send);
      opts.setOutput(static_cast<T*>(out_p), recv);
    });
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::alltoallv(opts);
  });
}

}  // namespace

PL_Error* all_to_all(PL_ProcessGroup* pg, const PL_Tensor* input, const int64_t* input_counts, PL_Tensor* output,
                     const int64_t* output_counts, PL_Work** out) noexcept {
  return entry(pg, "all_to_all", [&] {
    const std::string w = where("all_to_all");
    pg::OpDesc d = pg::all_to_all_args(input, input_counts, output, output_counts, shape(pg), w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();

    const PL_Tensor arg_in = *input, arg_out = *output;
    const std::vector<int64_t> send = d.counts, recv = d.recv_counts;
    const std::vector<int64_t> row = d.equal_chunks ? std::vector<int64_t>() : pg::peer_count_row(d);
    const int world = pg->world;
    const auto ctx = pg->context;
    pg->core->run(
        std::move(d),
        [arg_in, arg_out, send, recv, row, world, ctx, staging = pg->staging](const pg::OpContext& oc) {
          if (world > 1) {
            if (row.empty()) {
              if (arg_in.numel == 0) return tagged_barrier(ctx, oc);  // every rank's numel is 0 (fingerprint)
            } else {
              const auto table = exchange_counts(ctx, oc, row);
              pg::check_peer_counts(table, world);
              bool any = false;
              for (int64_t c : table) any = any || c != 0;
              if (!any) return;  // every rank met every other in the exchange; nothing to move
            }
          }
          PL_Tensor in = arg_in, o = arg_out;  // the staged copies point at host memory
          StagedOp staged(staging);
          staged.add(&in, StagedOp::kRead);
          staged.add(&o, StagedOp::kWrite);
          staged.stage_in();
          exchange_host(ctx, oc, in, o, send, recv);
          staged.stage_out();
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
