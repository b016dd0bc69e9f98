// Splits one worker stream (its stdout or its stderr) into lines and puts the worker's tag in
// front of each ("[rank 3] "), so that the output of many workers stays readable on one terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace plrt::launcher {

class LinePrefixer {
 public:
  // A line longer than this is passed on in pieces (each ended by a newline) rather than held
  // back without bound: a worker printing a progress bar with '\r' never ends its line.
  static constexpr size_t kMaxLine = 64 * 1024;

  // `prefix` is the worker's tag with its trailing space ("[rank 3] ").  `any_rank_tag`: lines
  // that already carry any "[rank M] " tag keep it alone (a process per node whose own workers
  // tag their lines).
  LinePrefixer(std::string prefix, bool any_rank_tag) : prefix_(std::move(prefix)), any_rank_(any_rank_tag) {}

  // Appends to `out` every line that `data` completes, tagged.  Keeps the unfinished rest.
  void feed(std::string_view data, std::string& out);
  // The end of the stream: the unfinished last line, tagged and ended with a newline.
  void finish(std::string& out);

  // Whether `line` is tagged already: it starts with `prefix`, or one of its leading bracketed
  // fields is the tag.  The runtime's logger writes "[12:00:00.000] [info] [rank 3] message", so
  // its rank tag comes after a time and a level.
  static bool tagged(std::string_view line, std::string_view prefix, bool any_rank_tag);

 private:
  void emit(std::string_view line, std::string& out) const;
  std::string prefix_;
  bool any_rank_;
  std::string partial_;
};

}  // namespace plrt::launcher
