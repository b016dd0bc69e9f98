// TensorBoard's event files (what Lightning's TensorBoardLogger writes:
// lightning_logs/version_<n>/events.out.tfevents.<unix time>.<host>.<pid>.<n>), written without
// TensorFlow or protobuf: the TFRecord framing and the few protobuf fields a scalar needs,
// encoded here to the formats' specifications.
//
// A record: uint64 length (little-endian), masked CRC-32C of those 8 bytes, the data, masked
// CRC-32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.  The data is one
// tensorflow.Event (event.proto): wall_time (double, field 1), step (int64, field 2) and either
// file_version (string, field 3: "brain.Event:2" in the first record) or summary (Summary, field
// 5) whose repeated value (field 1) is a Summary.Value (summary.proto) with tag (string, field 1)
// and simple_value (float, field 2).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace plrt::sdk::tensorboard {

uint32_t crc32c(std::string_view bytes);  // CRC-32C (Castagnoli), as iSCSI and TFRecord use it
uint32_t masked_crc32c(std::string_view bytes);
std::string frame_record(std::string_view data);  // one TFRecord around `data`

// Serialised tensorflow.Event messages.
std::string file_version_event(double wall_time, const std::string& version = "brain.Event:2");
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

// The file name Lightning's SummaryWriter picks: events.out.tfevents.<unix seconds>.<host>.<pid>.<n>,
// `n` counting the files this process opened.
std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n);

// One event file, rank 0's.  open() makes it and writes the file_version record; records are
// buffered by stdio and reach the disk at flush() (the trainer calls it at each epoch's end and
// when fit ends) and close().
class EventWriter {
 public:
  EventWriter() = default;
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  ~EventWriter();
  void open(const std::string& folder);  // throws naming the file when it cannot be made
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void flush();
  void close();

 private:
  void write(const std::string& event);
  std::FILE* file_ = nullptr;
  std::string path_;
};

double wall_time_now();  // seconds since the Unix epoch, with the clock's fraction

}  // namespace plrt::sdk::tensorboard
