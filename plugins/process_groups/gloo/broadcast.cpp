// broadcast: gloo::broadcast (binomial tree from the root), in place in every rank's tensor.  A
// device tensor is staged through host memory: the root only copies it in, the others only back.
#include <gloo/broadcast.h>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

PL_Error* broadcast(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out) noexcept {
  return entry(pg, "broadcast", [&] {
    const std::string w = where("broadcast");
    pg::OpDesc d = pg::broadcast_args(tensor, root, shape(pg), w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();

    const PL_Tensor arg = *tensor;
    const int world = pg->world;
    const bool is_root = pg->rank == root;
    const auto ctx = pg->context;
    pg->core->run(
        std::move(d),
        [arg, root, world, is_root, ctx, staging = pg->staging](const pg::OpContext& oc) {
          if (world == 1) return;
          if (arg.numel == 0) return tagged_barrier(ctx, oc);
          PL_Tensor t = arg;
          StagedOp staged(staging);
          staged.add(&t, is_root ? StagedOp::kRead : StagedOp::kWrite);
          staged.stage_in();
          gloo_call([&] {
            Guarded<gloo::BroadcastOptions> guarded_opts(ctx);  // destroyed under buffers_mutex()
            auto& opts = *guarded_opts;
            with_element(pl_dtype_size(t.dtype), [&](auto e) {
              opts.setOutput(static_cast<decltype(e)*>(t.data), static_cast<size_t>(t.numel));
            });
            opts.setRoot(root);
            opts.setTag(oc.tag);
            opts.setTimeout(oc.remaining());
            gloo::broadcast(opts);
          });
          staged.stage_out();
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
