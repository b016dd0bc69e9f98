#include "bucket_plan.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace plrt::reducer {

namespace {

struct Open {
  PlannedBucket bucket;
  size_t first_position = 0;  // position of its first member in `in_order`
  bool closed_one = false;    // this group has closed a bucket: later ones get `cap`
};

}  // namespace

std::vector<PlannedBucket> plan_buckets(const std::vector<PlanInput>& in_order, size_t first_cap, size_t cap) {
  using Key = std::tuple<PL_DType, PL_DeviceType, int32_t>;
  std::map<Key, Open> open;
  std::vector<std::pair<size_t, PlannedBucket>> done;  // (first position, bucket)
  auto close = [&](Open& o) {
    if (!o.bucket.members.empty()) done.emplace_back(o.first_position, std::move(o.bucket));
    o.bucket = PlannedBucket{};
    o.closed_one = true;
  };
  for (size_t pos = 0; pos < in_order.size(); ++pos) {
    const PlanInput& p = in_order[pos];
    Open& o = open[Key{p.dtype, p.device.type, p.device.index}];
    const size_t limit = o.closed_one ? cap : first_cap;
    if (!o.bucket.members.empty() && o.bucket.bytes + p.bytes > limit) close(o);
    if (o.bucket.members.empty()) {
      o.first_position = pos;
      o.bucket.dtype = p.dtype;
      o.bucket.device = p.device;
    }
    o.bucket.members.push_back(p.index);
    o.bucket.offsets.push_back(o.bucket.bytes);
    o.bucket.bytes += p.bytes;
  }
  for (auto& kv : open) close(kv.second);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PlannedBucket> out;
  out.reserve(done.size());
  for (auto& d : done) out.push_back(std::move(d.second));
  return out;
}

PL_Tensor flat_view(void* data, const PlannedBucket& b, PL_Device device) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = b.dtype;
  t.device = device;
  t.numel = static_cast<int64_t>(b.bytes / pl_dtype_size(b.dtype));
  t.ndim = 1;
  t.shape[0] = t.numel;
  return t;
}

}  // namespace plrt::reducer
