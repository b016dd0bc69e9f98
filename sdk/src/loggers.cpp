// The trainer's loggers: which ones (TrainerOptions::logger) and the rows they get.
#include "loggers.hpp"

#include <algorithm>
#include <plrt/sdk/error.hpp>

namespace plrt::sdk {

namespace {
const char* const kValid = "csv, tensorboard";
}

std::vector<std::string> parse_logger_names(const std::string& text, const std::string& what) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    const std::string name = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (name != "csv" && name != "tensorboard")
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  what + "='" + text + "' is not valid: " +
                      (name.empty() ? std::string("an empty logger name") : "unknown logger '" + name + "'") +
                      "; valid: a comma-separated list of " + kValid);
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw Error(PL_ERR_INVALID_ARGUMENT, what + "='" + text + "' is not valid: '" + name +
                                               "' is named twice; valid: a comma-separated list of " + kValid);
    names.push_back(name);
    if (end == std::string::npos) return names;
    begin = end + 1;
  }
}

void Loggers::configure(const std::vector<std::string>& names) {
  csv_on_ = std::find(names.begin(), names.end(), "csv") != names.end();
  tensorboard_on_ = std::find(names.begin(), names.end(), "tensorboard") != names.end();
}

void Loggers::open(const std::string& folder) {
  if (csv_on_) csv_.open(folder + "/metrics.csv");
  if (tensorboard_on_) events_.open(folder);
}

void Loggers::open_existing(const std::string& folder, int64_t keep_before) {
  if (csv_on_) csv_.open_existing(folder + "/metrics.csv", keep_before);
  if (tensorboard_on_) events_.open(folder);
}

void Loggers::add_row(int64_t epoch, int64_t step, const std::map<std::string, double>& values) {
  if (values.empty()) return;
  if (csv_on_) csv_.add_row(epoch, step, values);
  if (events_.is_open()) {
    const double now = tensorboard::wall_time_now();
    for (const auto& [tag, value] : values) events_.add_scalar(tag, value, step, now);
    if (values.count("epoch") == 0) events_.add_scalar("epoch", static_cast<double>(epoch), step, now);
  }
}

void Loggers::flush() {
  if (csv_on_) csv_.flush();
  events_.flush();
}

}  // namespace plrt::sdk
