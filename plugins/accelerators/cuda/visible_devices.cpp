// CUDA_VISIBLE_DEVICES -> NVML indices; see visible_devices.hpp.
#include "visible_devices.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace plrt::cuda {
namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

}  // namespace

std::vector<std::optional<size_t>> map_visible_to_nvml(const char* cvd, const std::vector<std::string>& uuids,
                                                       size_t cuda_count, std::vector<std::string>* notes) {
  auto note = [&](const std::string& s) {
    if (notes) notes->push_back(s);
  };
  std::vector<std::optional<size_t>> order;
  if (cvd == nullptr) {
    for (size_t i = 0; i < uuids.size(); ++i) order.emplace_back(i);
  } else {
    const std::string_view all(cvd);
    std::vector<bool> used(uuids.size(), false);
    size_t start = 0;
    while (start <= all.size()) {
      size_t end = all.find(',', start);
      if (end == std::string_view::npos) end = all.size();
      const std::string_view entry = trim(all.substr(start, end - start));
      start = end + 1;
      std::optional<size_t> found;
      if (all_digits(entry)) {
        const size_t i = entry.size() > 9 ? uuids.size() : std::stoul(std::string(entry));
        if (i < uuids.size()) found = i;
      } else if (entry.size() > 4 && lower(entry.substr(0, 4)) == "gpu-") {
        const std::string prefix = lower(entry);  // CUDA takes a unique prefix of the UUID
        for (size_t i = 0; i < uuids.size(); ++i) {
          if (lower(uuids[i]).compare(0, prefix.size(), prefix) != 0) continue;
          if (found) {  // ambiguous: CUDA refuses it, and so ends the list
            found.reset();
            break;
          }
          found = i;
        }
      } else if (entry.size() > 4 && lower(entry.substr(0, 4)) == "mig-") {
        note("CUDA_VISIBLE_DEVICES entry '" + std::string(entry) +
             "' is a MIG instance: its processes and utilization are not checked (NVML reports them per GPU)");
        order.emplace_back(std::nullopt);
        continue;
      }
      if (!found || used[*found]) break;  // the first invalid entry ends the list, as in CUDA
      used[*found] = true;
      order.push_back(found);
    }
  }
  if (order.size() != cuda_count)
    note("CUDA sees " + std::to_string(cuda_count) + " device(s) but CUDA_VISIBLE_DEVICES" +
         (cvd ? "='" + std::string(cvd) + "'" : std::string(" (unset)")) + " and NVML's " +
         std::to_string(uuids.size()) + " give " + std::to_string(order.size()) +
         "; NVML's data is used only where the two agree");
  order.resize(cuda_count);
  return order;
}

}  // namespace plrt::cuda
