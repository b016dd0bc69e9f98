// TensorBoard event files: the TFRecord framing, the protobuf encoding of scalar events, and the
// file rank 0 appends them to (the formats are described in tensorboard_writer.hpp).
#include "tensorboard_writer.hpp"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <plrt/sdk/error.hpp>

namespace plrt::sdk::tensorboard {

namespace {

// Boost.CRC (header-only, already one of plrt's dependencies) with CRC-32C's parameters: the
// Castagnoli polynomial 0x1EDC6F41, initial value and final xor 0xFFFFFFFF, reflected input and
// output.  Debian bookworm has no libcrc32c package; the check value of "123456789" is 0xE3069283.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Protobuf's wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

// The Event's common head: wall_time (1) and step (2, int64 as a two's-complement varint; proto3
// leaves a zero step out).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  Crc32c c;
  c.process_bytes(bytes.data(), bytes.size());
  return c.checksum();
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_le(r, data.size(), 8);
  put_le(r, masked_crc32c(std::string_view(r.data(), 8)), 4);
  r.append(data.data(), data.size());
  put_le(r, masked_crc32c(data), 4);
  return r;
}

std::string file_version_event(double wall_time, const std::string& version) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(v, 2, 5);
  put_le(v, bits, 4);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string event_file_name(int64_t unix_seconds, const std::string& host, long pid, int n) {
  return "events.out.tfevents." + std::to_string(unix_seconds) + "." + host + "." + std::to_string(pid) + "." +
         std::to_string(n);
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::open(const std::string& folder) {
  close();
  static int files = 0;  // this process's event files so far
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  const double now = wall_time_now();
  path_ = folder + "/" + event_file_name(static_cast<int64_t>(now), host, static_cast<long>(getpid()), files++);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    throw pl::Error(PL_ERR_RUNTIME, "cannot create the TensorBoard event file " + path_ + ": " + std::strerror(errno));
  write(file_version_event(now));
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  if (file_) write(scalar_event(wall_time, step, tag, static_cast<float>(value)));
}

void EventWriter::write(const std::string& event) {
  const std::string r = frame_record(event);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size())
    throw pl::Error(PL_ERR_RUNTIME, "cannot write the TensorBoard event file " + path_ + ": " + std::strerror(errno));
}

void EventWriter::flush() {
  if (file_ && std::fflush(file_) != 0)
    throw pl::Error(PL_ERR_RUNTIME, "cannot write the TensorBoard event file " + path_ + ": " + std::strerror(errno));
}

void EventWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0)
    throw pl::Error(PL_ERR_RUNTIME, "cannot write the TensorBoard event file " + path_ + ": " + std::strerror(errno));
}

}  // namespace plrt::sdk::tensorboard
