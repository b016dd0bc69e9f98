// pl::ModelSummary (model_summary.hpp): the table Lightning's ModelSummary prints, built from the
// module tree (Module::named_children) and its parameters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/model_summary.hpp>
#include <plrt/sdk/trainer.hpp>
#include <vector>

#include "sdk_internal.hpp"

namespace pl {

namespace {

// The class name without its namespaces ("pl::nn::Linear" -> "Linear"), as Lightning shows it.
std::string type_name(const Module& m) {
  const std::string name = plrt::sdk::demangled(typeid(m));
  const size_t open = name.find('<');
  const size_t colon = name.rfind("::", open == std::string::npos ? std::string::npos : open);
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

using Row = TrainerModel::Submodule;

void collect(Module& m, const std::string& prefix, int depth, int max_depth, std::vector<Row>& out) {
  for (auto& [name, child] : m.named_children()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    Row r{full, type_name(*child), 0};
    for (auto& [pname, p] : child->named_parameters()) r.params += p->value.numel();
    out.push_back(r);
    if (max_depth < 0 || depth + 1 < max_depth) collect(*child, full, depth + 1, max_depth, out);
  }
}

std::string padded(const std::string& s, size_t width) {
  return s + std::string(width > s.size() ? width - s.size() : 0, ' ');
}

}  // namespace

ModelSummary::ModelSummary(int max_depth) : max_depth_(max_depth) {
  if (max_depth < -1)
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelSummary: max_depth " + std::to_string(max_depth) +
                                             " is not valid: -1 (every depth), 0 (no table) or a depth >= 1");
}

std::string ModelSummary::readable_count(int64_t n) {
  static const char* const labels[] = {"", "K", "M", "B", "T"};
  const double v = static_cast<double>(n);
  const int digits = n > 0 ? static_cast<int>(std::floor(std::log10(v))) + 1 : 1;
  const int groups = std::min(static_cast<int>(std::ceil(digits / 3.0)), 5);
  const double scaled = v * std::pow(10.0, -3.0 * (groups - 1));
  if (groups - 1 < 1 || scaled >= 100) {  // an integer with thousands separators ("5,000 T")
    std::string digits_text = std::to_string(static_cast<long long>(scaled)), grouped;
    for (size_t i = 0; i < digits_text.size(); ++i) {
      if (i > 0 && (digits_text.size() - i) % 3 == 0) grouped += ',';
      grouped += digits_text[i];
    }
    return grouped + " " + labels[groups - 1];
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", scaled, labels[groups - 1]);
  return buf;
}

std::vector<TrainerModel::Submodule> ModelSummary::submodules(Module& module, int max_depth) {
  std::vector<Row> rows;
  if (max_depth != 0) collect(module, "", 0, max_depth, rows);
  return rows;
}

std::string ModelSummary::table(Module& module, int max_depth) {
  return format(submodules(module, max_depth), module.named_parameters());
}

std::string ModelSummary::table(TrainerModel& model, int max_depth) {
  return format(max_depth != 0 ? model.submodules(max_depth) : std::vector<Row>{}, model.parameters());
}

std::string ModelSummary::format(const std::vector<TrainerModel::Submodule>& rows,
                                 const std::vector<std::pair<std::string, Parameter*>>& params) {
  int64_t trainable = 0, frozen = 0, bytes = 0;
  for (auto& [name, p] : params) {
    (p->requires_grad ? trainable : frozen) += p->value.numel();
    bytes += static_cast<int64_t>(p->value.nbytes());
  }
  std::vector<std::vector<std::string>> cols{{" "}, {"Name"}, {"Type"}, {"Params"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    cols[0].push_back(std::to_string(i));
    cols[1].push_back(rows[i].name);
    cols[2].push_back(rows[i].type);
    cols[3].push_back(readable_count(rows[i].params));
  }
  std::vector<size_t> widths;
  size_t total = 0;
  for (const auto& c : cols) {
    size_t w = 0;
    for (const auto& v : c) w = std::max(w, v.size());
    widths.push_back(w);
    total += w;
  }
  total += 3 * (cols.size() + 1);  // Lightning's divider width, to the character
  auto line = [&](size_t r) {
    std::string s;
    for (size_t c = 0; c < cols.size(); ++c) s += (c ? " | " : "") + padded(cols[c][r], widths[c]);
    return s;
  };
  std::string out = line(0) + "\n" + std::string(total, '-');
  for (size_t r = 1; r < cols[0].size(); ++r) out += "\n" + line(r);
  char size[64];
  std::snprintf(size, sizeof size, "%-10.3f", static_cast<double>(bytes) / 1e6);
  out += "\n" + std::string(total, '-');
  out += "\n" + padded(readable_count(trainable), 10) + "Trainable params";
  out += "\n" + padded(readable_count(frozen), 10) + "Non-trainable params";
  out += "\n" + padded(readable_count(trainable + frozen), 10) + "Total params";
  out += "\n" + std::string(size) + "Total estimated model params size (MB)";
  return out;
}

void ModelSummary::on_fit_start(Trainer& trainer, LightningBase& module) {
  if (trainer.global_rank() != 0 || max_depth_ == 0) return;
  (void)module;
  if (trainer.model() != nullptr)
    trainer.runtime().log(PL_LOG_INFO, "model summary\n" + table(*trainer.model(), max_depth_));
}

}  // namespace pl
