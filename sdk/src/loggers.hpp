// The trainer's loggers (TrainerOptions::logger, Lightning's `logger=`): metrics.csv (CSVLogger)
// and TensorBoard's event file (TensorBoardLogger), both in lightning_logs/version_<n>/ and both
// rank 0's.  Every row the trainer logs goes to each logger chosen, with the same step; the event
// file also gets "epoch" as a scalar, as Lightning adds it to every logged row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "tensorboard_writer.hpp"

namespace plrt::sdk {

// "csv,tensorboard" → {"csv", "tensorboard"}; an empty, unknown or repeated name is a
// PL_ERR_INVALID_ARGUMENT naming it (`what`: the option or variable it came from) and the valid ones.
std::vector<std::string> parse_logger_names(const std::string& text, const std::string& what);

class Loggers {
 public:
  void configure(const std::vector<std::string>& names);
  // A new version folder; or one a resumed run continues (metrics.csv keeps its rows before
  // `keep_before`; TensorBoard gets a new event file beside the old ones, as Lightning does).
  void open(const std::string& folder);
  void open_existing(const std::string& folder, int64_t keep_before);
  void add_row(int64_t epoch, int64_t step, const std::map<std::string, double>& values);
  void flush();  // at each epoch's end and when fit ends; no-op before open
  bool wants_rows() const { return csv_.is_open() || events_.is_open(); }  // opened, with a logger on

 private:
  bool csv_on_ = true, tensorboard_on_ = false;
  CsvLog csv_;
  tensorboard::EventWriter events_;
};

}  // namespace plrt::sdk
