// Small exchanges between the ranks over the job's "plrt.torch" group, for the checks and the
// checkpoints: a text from one rank, every rank's bytes on one rank, a flag every rank agrees on.
// One process: each is the identity.
#include <algorithm>

#include "state.hpp"

namespace pl::torch::detail {

std::string broadcast_text(const std::string& text, int root) {
  auto g = group();
  if (!g) return text;
  std::vector<int64_t> len{static_cast<int64_t>(text.size())};
  PL_Tensor len_view = pl::tensor_view(len);
  g->broadcast(len_view, root);
  std::string out = g->rank() == root ? text : std::string(static_cast<size_t>(len[0]), '\0');
  if (len[0] > 0) {
    PL_Tensor bytes = pl::tensor_view(out.data(), PL_U8, len[0]);
    g->broadcast(bytes, root);
  }
  return out;
}

std::vector<std::string> gather_bytes(const std::string& bytes, int to) {
  auto g = group();
  if (!g) return {bytes};
  const int world = g->world_size(), rank = g->rank();
  std::vector<int64_t> lens(static_cast<size_t>(world), 0);
  lens[static_cast<size_t>(rank)] = static_cast<int64_t>(bytes.size());
  PL_Tensor lens_view = pl::tensor_view(lens);
  g->allreduce(lens_view, PL_REDUCE_SUM);
  const int64_t longest = std::max<int64_t>(1, *std::max_element(lens.begin(), lens.end()));
  // every rank's bytes padded to the longest, gathered (an all-gather: the group has no gather)
  std::string mine(static_cast<size_t>(longest), '\0');
  std::copy(bytes.begin(), bytes.end(), mine.begin());
  std::string all(static_cast<size_t>(longest * world), '\0');
  PL_Tensor in = pl::tensor_view(mine.data(), PL_U8, longest);
  std::vector<PL_Tensor> outs;
  for (int r = 0; r < world; ++r) outs.push_back(pl::tensor_view(all.data() + r * longest, PL_U8, longest));
  g->allgather(in, outs);
  if (rank != to) return {};
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r)
    out.emplace_back(all.data() + r * longest, static_cast<size_t>(lens[static_cast<size_t>(r)]));
  return out;
}

bool all_ranks(bool ok) {
  auto g = group();
  if (!g) return ok;
  std::vector<int32_t> flag{ok ? 1 : 0};
  PL_Tensor t = pl::tensor_view(flag);
  g->allreduce(t, PL_REDUCE_MIN);
  return flag[0] == 1;
}

}  // namespace pl::torch::detail
