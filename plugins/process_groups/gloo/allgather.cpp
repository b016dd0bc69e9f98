// allgather: gloo::allgatherv (ring), with a different element count per rank allowed.  The
// outputs are written in place when they lie back to back in rank order in one buffer (the common
// case: views of one tensor); otherwise gloo gathers into a temporary that is then copied out.
// Device tensors are staged through host memory (staging.hpp), which keeps that layout.
#include <gloo/allgatherv.h>

#include <cstring>
#include <vector>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

using plugin::fail;

namespace {

// The host algorithm: `in` and `outs` are in host memory.
void gather_host(const std::shared_ptr<gloo::Context>& ctx, const pg::OpContext& oc, const PL_Tensor& in,
                 const std::vector<PL_Tensor>& outs, int rank, const std::vector<size_t>& counts, size_t total) {
  const size_t es = pl_dtype_size(in.dtype);
  const size_t world = outs.size();
  if (world == 1) {
    if (in.numel > 0 && outs[0].data != in.data) std::memmove(outs[0].data, in.data, bytes_of(in));
    return;
  }
  std::vector<size_t> offsets(world);
  for (size_t r = 0, at = 0; r < world; ++r) {
    offsets[r] = at;
    at += counts[r];
  }
  // In place when the outputs are one buffer in rank order.
  uint8_t* base = nullptr;
  bool contiguous = true;
  for (size_t r = 0; r < world && contiguous; ++r) {
    if (counts[r] == 0) continue;
    auto* p = static_cast<uint8_t*>(outs[r].data);
    if (base == nullptr)
      base = p - offsets[r] * es;
    else
      contiguous = p == base + offsets[r] * es;
  }
  std::vector<uint8_t> tmp;
  if (!contiguous) {
    tmp.resize(total * es);
    base = tmp.data();
  }
  const bool in_place = contiguous && counts[rank] > 0 && in.data == base + offsets[rank] * es;
  gloo_call([&] {
    Guarded<gloo::AllgathervOptions> guarded_opts(ctx);  // destroyed under buffers_mutex()
    auto& opts = *guarded_opts;
    with_element(es, [&](auto e) {
      using T = decltype(e);
      if (!in_place && counts[rank] > 0) opts.setInput(static_cast<T*>(const_cast<void*>(in.data)), counts[rank]);
      opts.setOutput(reinterpret_cast<T*>(base), counts);
    });
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::allgatherv(opts);
  });
  if (!contiguous)
    for (size_t r = 0; r < world; ++r)
      if (counts[r] > 0) std::memcpy(outs[r].data, base + offsets[r] * es, counts[r] * es);
}

}  // namespace

PL_Error* allgather(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                    PL_Work** out) noexcept {
  return entry(pg, "allgather", [&] {
    const std::string w = where("allgather");
    pg::OpDesc d = pg::allgather_args(input, outputs, num_outputs, shape(pg), w, tensor_rule(*pg, w));
    std::vector<PL_Tensor> arg_outs(outputs, outputs + num_outputs);
    pg->core->throw_if_unusable();

    const PL_Tensor arg_in = *input;
    const int rank = pg->rank;
    const auto ctx = pg->context;
    pg->core->run(
        std::move(d),
        [arg_in, arg_outs, rank, ctx, staging = pg->staging](const pg::OpContext& oc) {
          std::vector<size_t> counts;
          size_t total = 0;
          for (const auto& o : arg_outs) {
            counts.push_back(static_cast<size_t>(o.numel));
            total += counts.back();
          }
          if (arg_outs.size() > 1 && total == 0) return tagged_barrier(ctx, oc);
          PL_Tensor in = arg_in;
          std::vector<PL_Tensor> outs = arg_outs;  // the staged copies point at host memory
          StagedOp staged(staging);
          staged.add(&in, StagedOp::kRead);
          for (auto& o : outs) staged.add(&o, StagedOp::kWrite);
          staged.stage_in();
          gather_host(ctx, oc, in, outs, rank, counts, total);
          staged.stage_out();
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
