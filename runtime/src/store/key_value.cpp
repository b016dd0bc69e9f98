// TCPStore's semantics for each request (see key_value.hpp).
#include "store/key_value.hpp"

#include <charconv>
#include <cstdint>

namespace plrt::store {
namespace {

// A stored counter: decimal text, as TCPStore writes it.
bool parse_counter(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

Outcome answer(Reply kind, std::string text = {}, int64_t number = 0, bool changed = false) {
  return {Response{kind, std::move(text), number, {}}, changed};
}

}  // namespace

bool KeyValueMap::all_exist(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

std::vector<std::string> KeyValueMap::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.count(k)) out.push_back(k);
  return out;
}

Outcome KeyValueMap::apply(Request& r) {
  switch (r.op) {
    case Op::Set:
      data_[r.key] = std::move(r.value);
      return answer(Reply::Ok, {}, 0, true);
    case Op::Get:
      if (auto it = data_.find(r.key); it != data_.end()) return answer(Reply::Value, it->second);
      return {};
    case Op::Add: {
      int64_t value = 0;
      auto it = data_.find(r.key);
      if (it != data_.end() && !parse_counter(it->second, &value))
        return answer(Reply::Error,
                      "add: the value of " + in_quotes(r.key) + " is not an integer: " + in_quotes(it->second));
      if (__builtin_add_overflow(value, r.number, &value))
        return answer(Reply::Error, "add: " + in_quotes(r.key) + " + " + std::to_string(r.number) + " overflows int64");
      data_[r.key] = std::to_string(value);
      return answer(Reply::Int, {}, value, true);
    }
    case Op::CompareSet: {
      // TCPStore's rules: absent + empty expected sets it; absent + anything else answers
      // `expected` and leaves it absent; present + equal sets it; the reply is the value now.
      auto it = data_.find(r.key);
      if (it == data_.end()) {
        if (!r.value.empty()) return answer(Reply::Value, r.value);
        it = data_.emplace(r.key, std::move(r.desired)).first;
      } else if (it->second == r.value) {
        it->second = std::move(r.desired);
      } else {
        return answer(Reply::Value, it->second);
      }
      return answer(Reply::Value, it->second, 0, true);
    }
    case Op::Remove:
      return answer(Reply::Bool, {}, data_.erase(r.key) ? 1 : 0);
    case Op::Check:
      return answer(Reply::Bool, {}, all_exist(r.keys) ? 1 : 0);
    case Op::Wait:
      if (all_exist(r.keys)) return answer(Reply::Ok);
      return {};
    case Op::NumKeys:
      return answer(Reply::Int, {}, static_cast<int64_t>(data_.size()));
    case Op::Hello:
      break;  // the server's handshake, never applied here
  }
  return answer(Reply::Error, std::string("a ") + op_name(r.op) + " request cannot be applied to the map");
}

}  // namespace plrt::store
