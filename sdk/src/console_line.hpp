// The live line at the bottom of this process's terminal (stderr), shared by the progress bar and
// the runtime's log lines: one mutex orders them, so that a log line never lands glued to a bar
// frame.  Process-wide, as stderr is; never destroyed (a Runtime that outlives its Trainer may
// still log through log_callback).
#pragma once

#include <plrt/runtime.h>

#include <mutex>
#include <string>

namespace plrt::sdk {

class ConsoleLine {
 public:
  static ConsoleLine& get();
  // "\r" + text + "\x1b[K": the live line becomes `text` (no newline).
  void show(const std::string& text);
  // The live line becomes `text`, ended with a newline: it stays as history; no live line after.
  void finish(const std::string& text);
  // Ends a live line where it is (a newline), if one is shown.
  void close();
  // A log line: the live line erased ("\r\x1b[K"), `line` + "\n", the live line redrawn.
  void log_line(const char* line);
  // RuntimeOptions::log_callback for the trainer's runtime while the bar is on (user: unused).
  static void log_callback(void* user, PL_LogLevel level, const char* line);

 private:
  void write_all(const std::string& bytes) const;
  std::mutex mu_;
  std::string live_;
  bool shown_ = false;
};

}  // namespace plrt::sdk
