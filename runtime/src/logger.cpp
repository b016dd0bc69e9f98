#include "logger.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <mutex>

#include "error.hpp"

namespace plrt::rt {
namespace {

// Hands each formatted line to the host program's callback (spdlog 1.10 has no callback sink).
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  CallbackSink(PL_LogCallback cb, void* user) : cb_(cb), user_(user) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    cb_(user_, static_cast<PL_LogLevel>(msg.level), line.c_str());
  }
  void flush_() override {}

 private:
  PL_LogCallback cb_;
  void* user_;
};

}  // namespace

spdlog::level::level_enum parse_log_level(const std::string& text, const std::string& origin) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "trace") return spdlog::level::trace;
  if (t == "debug") return spdlog::level::debug;
  if (t == "info") return spdlog::level::info;
  if (t == "warn" || t == "warning") return spdlog::level::warn;
  if (t == "error" || t == "err") return spdlog::level::err;
  if (t == "critical") return spdlog::level::critical;
  if (t == "off") return spdlog::level::off;
  fail(PL_ERR_INVALID_ARGUMENT,
       origin + "='" + text + "' is not a log level; valid: trace, debug, info, warn, error, critical, off");
}

spdlog::level::level_enum to_spdlog(PL_LogLevel level) {
  // PL_LogLevel mirrors spdlog's numbering; clamp anything out of range.
  if (level < PL_LOG_TRACE) return spdlog::level::trace;
  if (level > PL_LOG_OFF) return spdlog::level::off;
  return static_cast<spdlog::level::level_enum>(level);
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& level_text, const std::string& level_origin,
                                            std::optional<int> rank, PL_LogCallback callback, void* user) {
  auto level = parse_log_level(level_text, level_origin);
  spdlog::sink_ptr sink;
  if (callback)
    sink = std::make_shared<CallbackSink>(callback, user);
  else
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("plrt", sink);
  std::string prefix = rank ? "[rank " + std::to_string(*rank) + "] " : "";
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] " + prefix + "%v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace plrt::rt
