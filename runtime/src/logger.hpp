// One spdlog logger per runtime (never registered globally, so two runtimes keep apart).
// Level from PL_LOG_LEVEL unless the runtime's options name one; lines carry "[rank N]".
#pragma once

#include <plrt/runtime.h>
#include <spdlog/logger.h>

#include <memory>
#include <optional>
#include <string>

namespace plrt::rt {

// Parses a level name ("trace", "debug", "info", "warn"/"warning", "error", "critical", "off");
// throws a PL_ERR_INVALID_ARGUMENT naming `origin` (e.g. "PL_LOG_LEVEL") and the valid names.
spdlog::level::level_enum parse_log_level(const std::string& text, const std::string& origin);

std::shared_ptr<spdlog::logger> make_logger(const std::string& level_text, const std::string& level_origin,
                                            std::optional<int> rank, PL_LogCallback callback, void* user);

spdlog::level::level_enum to_spdlog(PL_LogLevel level);

}  // namespace plrt::rt
