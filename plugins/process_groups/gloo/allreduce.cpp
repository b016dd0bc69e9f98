// allreduce: gloo::allreduce (ring) with this plugin's reduce kernels (reduce.hpp).  AVG sums,
// then divides by the world size; uint8 and int32 sum in an int64 temporary so that the mean is
// exact (see reduce.hpp).  A device tensor is staged through host memory (staging.hpp).
#include "gloo_pg.hpp"
#include "reduce.hpp"

#include <gloo/allreduce.h>

#include <vector>

namespace plrt::gloo_pg {

namespace {

void gloo_allreduce(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, void* data, size_t n,
                    size_t elem_size, pg::ReduceFn fn, bool bcube) {
  gloo_call([&] {
    gloo::AllreduceOptions opts(ctx);
    if (bcube) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    with_element(elem_size, [&](auto t) { opts.setOutput(static_cast<decltype(t)*>(data), n); });
    opts.setReduceFunction(fn);
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::allreduce(opts);
  });
}

// The host algorithm, in place in `t` (host memory).
void reduce_host(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, const PL_Tensor& t,
                 PL_ReduceOp op, int world, bool bcube) {
  const size_t n = static_cast<size_t>(t.numel);
  if (op == PL_REDUCE_AVG && pg::avg_widens(t.dtype)) {
    std::vector<int64_t> wide(n);
    pg::widen_to_i64(t.data, t.dtype, wide.data(), n);
    gloo_allreduce(ctx, oc, wide.data(), n, sizeof(int64_t), pg::reduce_fn(PL_REDUCE_SUM, PL_I64), bcube);
    pg::narrow_avg_from_i64(wide.data(), world, t.dtype, t.data, n);
    return;
  }
  gloo_allreduce(ctx, oc, t.data, n, pl_dtype_size(t.dtype), pg::reduce_fn(op, t.dtype), bcube);
  if (op == PL_REDUCE_AVG) pg::divide_inplace(t.data, t.dtype, n, world);
}

}  // namespace

PL_Error* allreduce(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out) noexcept {
  return entry(pg, "allreduce", [&] {
    const std::string w = where("allreduce");
    pg::OpDesc d = pg::allreduce_args(tensor, op, w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();

    const PL_Tensor arg = *tensor;
    const int world = pg->world;
    const auto ctx = pg->context;
    const bool bcube = pg->allreduce_bcube;
    pg->core->run(std::move(d), [arg, op, world, ctx, bcube, staging = pg->staging](const pg::OpContext& oc) {
      if (world == 1) return;  // the reduction of one rank (and its mean) is its own value
      if (arg.numel == 0) return tagged_barrier(ctx, oc);
      PL_Tensor t = arg;
      StagedOp staged(staging);
      staged.add(&t, StagedOp::kReadWrite);
      staged.stage_in();
      reduce_host(ctx, oc, t, op, world, bcube);
      staged.stage_out();
    }, out);
  });
}

}  // namespace plrt::gloo_pg
