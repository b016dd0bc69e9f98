// broadcast: gloo::broadcast (binomial tree from the root), in place in every rank's tensor.
#include "gloo_pg.hpp"

#include <gloo/broadcast.h>

namespace plrt::gloo_pg {

PL_Error* broadcast(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out) noexcept {
  return entry(pg, "broadcast", [&] {
    const std::string w = where("broadcast");
    pg::OpDesc d = pg::broadcast_args(tensor, root, shape(pg), w, cpu_tensors(w));
    pg->core->throw_if_unusable();

    const PL_Tensor t = *tensor;
    const int world = pg->world;
    const auto ctx = pg->context;
    pg->core->run(std::move(d), [t, root, world, ctx](const pg::OpContext& oc) {
      if (world == 1) return;
      if (t.numel == 0) return tagged_barrier(ctx, oc);
      gloo_call([&] {
        gloo::BroadcastOptions opts(ctx);
        with_element(pl_dtype_size(t.dtype),
                     [&](auto e) { opts.setOutput(static_cast<decltype(e)*>(t.data), static_cast<size_t>(t.numel)); });
        opts.setRoot(root);
        opts.setTag(oc.tag);
        opts.setTimeout(oc.remaining());
        gloo::broadcast(opts);
      });
    }, out);
  });
}

}  // namespace plrt::gloo_pg
