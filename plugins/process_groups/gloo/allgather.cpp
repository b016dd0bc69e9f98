// allgather: gloo::allgatherv (ring), with a different element count per rank allowed.  The
// outputs are written in place when they lie back to back in rank order in one buffer (the common
// case: views of one tensor); otherwise gloo gathers into a temporary that is then copied out.
#include "gloo_pg.hpp"

#include <gloo/allgatherv.h>

#include <cstring>
#include <vector>

namespace plrt::gloo_pg {

using plugin::fail;

PL_Error* allgather(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                    PL_Work** out) noexcept {
  return entry(pg, "allgather", [&] {
    const std::string w = where("allgather");
    pg::OpDesc d = pg::allgather_args(input, outputs, num_outputs, shape(pg), w, cpu_tensors(w));
    std::vector<PL_Tensor> outs(outputs, outputs + num_outputs);
    pg->core->throw_if_unusable();

    const PL_Tensor in = *input;
    const int rank = pg->rank;
    const auto ctx = pg->context;
    pg->core->run(std::move(d), [in, outs, rank, ctx](const pg::OpContext& oc) {
      const size_t es = pl_dtype_size(in.dtype);
      const size_t world = outs.size();
      if (world == 1) {
        if (in.numel > 0 && outs[0].data != in.data) std::memmove(outs[0].data, in.data, bytes_of(in));
        return;
      }
      std::vector<size_t> counts(world), offsets(world);
      size_t total = 0;
      for (size_t r = 0; r < world; ++r) {
        counts[r] = static_cast<size_t>(outs[r].numel);
        offsets[r] = total;
        total += counts[r];
      }
      if (total == 0) return tagged_barrier(ctx, oc);
      // In place when the outputs are one buffer in rank order.
      uint8_t* base = nullptr;
      bool contiguous = true;
      for (size_t r = 0; r < world && contiguous; ++r) {
        if (counts[r] == 0) continue;
        auto* p = static_cast<uint8_t*>(outs[r].data);
        if (base == nullptr) base = p - offsets[r] * es;
        else contiguous = p == base + offsets[r] * es;
      }
      std::vector<uint8_t> tmp;
      if (!contiguous) {
        tmp.resize(total * es);
        base = tmp.data();
      }
      const bool in_place = contiguous && counts[rank] > 0 && in.data == base + offsets[rank] * es;
      gloo_call([&] {
        gloo::AllgathervOptions opts(ctx);
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
    }, out);
  });
}

}  // namespace plrt::gloo_pg
