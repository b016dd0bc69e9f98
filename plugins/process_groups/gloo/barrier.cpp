// barrier: gloo::barrier (dissemination), tagged like every collective so that a rank calling
// something else at this sequence number never completes it.
#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

PL_Error* barrier(PL_ProcessGroup* pg, PL_Work** out) noexcept {
  return entry(pg, "barrier", [&] {
    pg->core->throw_if_unusable();
    pg::OpDesc d;
    d.kind = pg::OpKind::kBarrier;
    const int world = pg->world;
    const auto ctx = pg->context;
    pg->core->run(
        std::move(d),
        [world, ctx](const pg::OpContext& oc) {
          if (world > 1) tagged_barrier(ctx, oc);
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
