// The argument rules of pack and unpack (see kernel_args.hpp and pl_accelerator.h): the bucket
// copies of the gradient-sync core.  Addresses and counts only; nothing is read.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernel_args.hpp"

namespace plrt::kernel_args {

using plugin::fail;

void pack(Target target, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets, const PL_Tensor* flat,
          bool unpack) {
  const char* op = unpack ? "unpack" : "pack";
  const std::string o = op;
  check_tensor_on(target, flat, op, "flat");
  if (num_parts == 0) return;
  if (parts == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, o + ": parts is NULL for " + std::to_string(num_parts) + " parts");
  if (offsets == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, o + ": offsets is NULL for " + std::to_string(num_parts) + " parts");
  std::vector<std::pair<uintptr_t, size_t>> spans;  // unpack: the parts' byte ranges, for the overlap check
  for (size_t i = 0; i < num_parts; ++i) {
    const std::string name = "parts[" + std::to_string(i) + "]";
    const PL_Tensor* p = &parts[i];
    check_tensor_on(target, p, op, name.c_str());
    check_same_device(target, flat, "flat", p, name.c_str(), op);
    if (p->dtype != flat->dtype)
      fail(PL_ERR_INVALID_ARGUMENT, o + ": " + name + " is " + pl_dtype_name(p->dtype) + " but flat is " +
                                        pl_dtype_name(flat->dtype) + "; every part has flat's dtype");
    if (offsets[i] < 0)
      fail(PL_ERR_INVALID_ARGUMENT, o + ": offsets[" + std::to_string(i) + "] is " + std::to_string(offsets[i]) +
                                        "; offsets count elements of flat from 0");
    if (offsets[i] > flat->numel || p->numel > flat->numel - offsets[i])
      fail(PL_ERR_INVALID_ARGUMENT, o + ": " + name + " (" + std::to_string(p->numel) + " elements at offset " +
                                        std::to_string(offsets[i]) + ") runs past the end of flat (" +
                                        std::to_string(flat->numel) + " elements)");
    check_no_overlap(p, name.c_str(), flat, "flat", op, false);
    if (unpack && p->numel > 0)
      spans.emplace_back(reinterpret_cast<uintptr_t>(p->data), static_cast<size_t>(p->numel) * pl_dtype_size(p->dtype));
  }
  if (!unpack) return;
  std::vector<size_t> order(spans.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a].first < spans[b].first; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = spans[order[k - 1]];
    if (spans[order[k]].first < prev.first + prev.second)
      fail(PL_ERR_INVALID_ARGUMENT, o + ": two parts share memory (at " + std::to_string(spans[order[k]].first) +
                                        "); each part is written once, so the parts must not overlap");
  }
}

}  // namespace plrt::kernel_args
