#include "line_prefixer.hpp"

#include <cctype>

namespace plrt::launcher {

namespace {

// How many leading "[...] " fields may come before a rank tag: the logger's time and level.
constexpr int kMaxLeadingFields = 3;

bool is_rank_tag(std::string_view field) {  // "[rank 12]"
  constexpr std::string_view head = "[rank ";
  if (field.size() < head.size() + 2 || field.substr(0, head.size()) != head || field.back() != ']') return false;
  for (size_t i = head.size(); i + 1 < field.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(field[i]))) return false;
  return true;
}

}  // namespace

bool LinePrefixer::tagged(std::string_view line, std::string_view prefix, bool any_rank_tag) {
  if (line.substr(0, prefix.size()) == prefix) return true;
  const std::string_view tag = prefix.substr(0, prefix.size() - 1);  // without its trailing space
  size_t pos = 0;
  for (int i = 0; i <= kMaxLeadingFields && pos < line.size() && line[pos] == '['; ++i) {
    size_t close = line.find(']', pos);
    if (close == std::string_view::npos) return false;
    std::string_view field = line.substr(pos, close + 1 - pos);
    // A tag counts when a space or the end of the line follows it.
    bool ends = close + 1 == line.size() || line[close + 1] == ' ' || line[close + 1] == '\r';
    if (ends && (field == tag || (any_rank_tag && is_rank_tag(field)))) return true;
    if (close + 1 >= line.size() || line[close + 1] != ' ') return false;
    pos = close + 2;
  }
  return false;
}

void LinePrefixer::emit(std::string_view line, std::string& out) const {
  if (!tagged(line, prefix_, any_rank_)) out += prefix_;
  out += line;
  out += '\n';
}

void LinePrefixer::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      if (partial_.size() >= kMaxLine) {
        emit(partial_, out);
        partial_.clear();
      }
      return;
    }
    if (partial_.empty()) {
      emit(data.substr(0, nl), out);
    } else {
      partial_.append(data.substr(0, nl));
      emit(partial_, out);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LinePrefixer::finish(std::string& out) {
  if (partial_.empty()) return;
  emit(partial_, out);
  partial_.clear();
}

}  // namespace plrt::launcher
