// Encoding and decoding of the store's messages.  See protocol.hpp and docs/store-protocol.md.
#include "store/protocol.hpp"

#include <stdexcept>

namespace plrt::store {
namespace {

// ---- writing ----
class Writer {
 public:
  Writer() { out_.append(kHeaderSize, '\0'); }
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void bytes(const std::string& s, size_t limit, const char* what) {
    if (s.size() > limit)
      throw std::length_error(std::string(what) + " of " + std::to_string(s.size()) + " bytes exceeds the limit of " +
                              std::to_string(limit));
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void keys(const std::vector<std::string>& ks) {
    if (ks.size() > kMaxKeysPerRequest)
      throw std::length_error(std::to_string(ks.size()) + " keys exceed the limit of " +
                              std::to_string(kMaxKeysPerRequest));
    u32(static_cast<uint32_t>(ks.size()));
    for (const auto& k : ks) bytes(k, kMaxKeyLength, "a key");
  }
  // Fills in the header; the payload must fit the frame limit.
  std::string finish() {
    size_t payload = out_.size() - kHeaderSize;
    if (payload > kMaxFrame)
      throw std::length_error("a message of " + std::to_string(payload) + " bytes exceeds the frame limit of " +
                              std::to_string(kMaxFrame) + " bytes");
    for (size_t i = 0; i < 4; ++i) out_[i] = static_cast<char>((payload >> (8 * i)) & 0xFF);
    return std::move(out_);
  }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  std::string out_;
};

// ---- reading: every read checks the bytes left; the first failure sticks ----
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  void fail(std::string why) {
    if (why_.empty()) why_ = std::move(why);
  }
  size_t left() const { return n_ - pos_; }

  uint8_t u8(const char* what) { return static_cast<uint8_t>(le(1, what)); }
  uint16_t u16(const char* what) { return static_cast<uint16_t>(le(2, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
  int64_t i64(const char* what) { return static_cast<int64_t>(le(8, what)); }

  std::string bytes(size_t limit, const char* what) {
    uint32_t len = u32(what);
    if (!ok()) return {};
    if (len > limit) {
      fail(std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " + std::to_string(limit));
      return {};
    }
    if (len > left()) {
      fail(std::string(what) + " announces " + std::to_string(len) + " bytes but only " + std::to_string(left()) +
           " remain");
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  std::vector<std::string> keys() {
    uint32_t count = u32("the key count");
    std::vector<std::string> ks;
    if (!ok()) return ks;
    if (count > kMaxKeysPerRequest) {
      fail("a key count of " + std::to_string(count) + " exceeds the limit of " + std::to_string(kMaxKeysPerRequest));
      return ks;
    }
    if (count > left() / 4) {  // each key takes at least its 4-byte length
      fail("a key count of " + std::to_string(count) + " does not fit in the " + std::to_string(left()) +
           " bytes left");
      return ks;
    }
    ks.reserve(count);
    for (uint32_t i = 0; i < count && ok(); ++i) ks.push_back(bytes(kMaxKeyLength, "a key"));
    return ks;
  }

  // The message must end exactly here.
  bool finish() {
    if (ok() && left() != 0) fail(std::to_string(left()) + " unexpected bytes after the message");
    return ok();
  }

 private:
  uint64_t le(int n, const char* what) {
    if (!ok()) return 0;
    if (left() < static_cast<size_t>(n)) {
      fail(std::string("the message ends inside ") + what);
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string why_;
};

bool is_timed(Op op) { return op == Op::Get || op == Op::Wait; }
bool has_key(Op op) {
  return op == Op::Set || op == Op::Get || op == Op::Add || op == Op::CompareSet || op == Op::Remove;
}
bool has_keys(Op op) { return op == Op::Check || op == Op::Wait; }

bool set_why(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Hello:
      return "hello";
    case Op::Set:
      return "set";
    case Op::Get:
      return "get";
    case Op::Add:
      return "add";
    case Op::CompareSet:
      return "compare_set";
    case Op::Remove:
      return "remove";
    case Op::Check:
      return "check";
    case Op::Wait:
      return "wait";
    case Op::NumKeys:
      return "num_keys";
  }
  return "unknown";
}

const char* reply_name(Reply kind) {
  switch (kind) {
    case Reply::Ok:
      return "ok";
    case Reply::Value:
      return "value";
    case Reply::Int:
      return "int";
    case Reply::Bool:
      return "bool";
    case Reply::Timeout:
      return "timeout";
    case Reply::Error:
      return "error";
    case Reply::BadToken:
      return "bad token";
  }
  return "unknown";
}

bool operator==(const Request& a, const Request& b) {
  return a.op == b.op && a.version == b.version && a.key == b.key && a.keys == b.keys && a.value == b.value &&
         a.desired == b.desired && a.number == b.number;
}

bool operator==(const Response& a, const Response& b) {
  return a.kind == b.kind && a.text == b.text && a.number == b.number && a.keys == b.keys;
}

FrameStatus peek_frame(const uint8_t* data, size_t size, size_t max_payload, size_t* payload_size) {
  if (size < kHeaderSize) return FrameStatus::NeedMore;
  size_t len = 0;
  for (size_t i = 0; i < kHeaderSize; ++i) len |= static_cast<size_t>(data[i]) << (8 * i);
  *payload_size = len;
  if (len > max_payload) return FrameStatus::TooLarge;
  return size - kHeaderSize >= len ? FrameStatus::Complete : FrameStatus::NeedMore;
}

std::string encode_request(const Request& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(r.op));
  switch (r.op) {
    case Op::Hello:
      w.u32(kMagic);
      w.u16(r.version);
      w.bytes(r.value, kMaxTokenLength, "the token");
      break;
    case Op::Set:
      w.bytes(r.key, kMaxKeyLength, "the key");
      w.bytes(r.value, kMaxFrame, "the value");
      break;
    case Op::Get:
      w.bytes(r.key, kMaxKeyLength, "the key");
      break;
    case Op::Add:
      w.bytes(r.key, kMaxKeyLength, "the key");
      w.i64(r.number);
      break;
    case Op::CompareSet:
      w.bytes(r.key, kMaxKeyLength, "the key");
      w.bytes(r.value, kMaxFrame, "the expected value");
      w.bytes(r.desired, kMaxFrame, "the desired value");
      break;
    case Op::Remove:
      w.bytes(r.key, kMaxKeyLength, "the key");
      break;
    case Op::Check:
    case Op::Wait:
      w.keys(r.keys);
      break;
    case Op::NumKeys:
      break;
    default:
      throw std::invalid_argument("unknown store op " + std::to_string(static_cast<int>(r.op)));
  }
  if (is_timed(r.op)) {
    if (r.number <= 0) throw std::invalid_argument("a store timeout must be positive, not " + std::to_string(r.number));
    w.i64(r.number);
  }
  return w.finish();
}

std::string encode_response(const Response& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(r.kind));
  switch (r.kind) {
    case Reply::Ok:
    case Reply::BadToken:
      break;
    case Reply::Value:
      w.bytes(r.text, kMaxFrame, "the value");
      break;
    case Reply::Int:
      w.i64(r.number);
      break;
    case Reply::Bool:
      if (r.number != 0 && r.number != 1) throw std::invalid_argument("a bool reply must be 0 or 1");
      w.u8(static_cast<uint8_t>(r.number));
      break;
    case Reply::Timeout:
      w.keys(r.keys);
      break;
    case Reply::Error:
      w.bytes(r.text, kMaxMessageLength, "the error message");
      break;
    default:
      throw std::invalid_argument("unknown store reply " + std::to_string(static_cast<int>(r.kind)));
  }
  return w.finish();
}

bool decode_request(const uint8_t* payload, size_t size, Request* out, std::string* why) {
  Reader in(payload, size);
  Request r;
  uint8_t op = in.u8("the message type");
  if (!in.ok()) return set_why(why, "an empty message");
  if (op < static_cast<uint8_t>(Op::Hello) || op > static_cast<uint8_t>(Op::NumKeys))
    return set_why(why, "unknown request type " + std::to_string(op));
  r.op = static_cast<Op>(op);
  if (r.op == Op::Hello) {
    uint32_t magic = in.u32("the protocol magic");
    if (in.ok() && magic != kMagic) return set_why(why, "wrong protocol magic (not a plrt store client)");
    r.version = in.u16("the protocol version");
    r.value = in.bytes(kMaxTokenLength, "the token");
  }
  if (has_key(r.op)) r.key = in.bytes(kMaxKeyLength, "the key");
  if (has_keys(r.op)) r.keys = in.keys();
  switch (r.op) {
    case Op::Set:
      r.value = in.bytes(kMaxFrame, "the value");
      break;
    case Op::Add:
      r.number = in.i64("the delta");
      break;
    case Op::CompareSet:
      r.value = in.bytes(kMaxFrame, "the expected value");
      r.desired = in.bytes(kMaxFrame, "the desired value");
      break;
    default:
      break;
  }
  if (is_timed(r.op)) {
    r.number = in.i64("the timeout");
    if (in.ok() && r.number <= 0) in.fail("a timeout of " + std::to_string(r.number) + " ms (must be > 0)");
  }
  if (!in.finish()) return set_why(why, std::string(op_name(r.op)) + " request: " + in.why());
  *out = std::move(r);
  return true;
}

bool decode_response(const uint8_t* payload, size_t size, Response* out, std::string* why) {
  Reader in(payload, size);
  Response r;
  uint8_t kind = in.u8("the message type");
  if (!in.ok()) return set_why(why, "an empty message");
  if (kind < static_cast<uint8_t>(Reply::Ok) || kind > static_cast<uint8_t>(Reply::BadToken))
    return set_why(why, "unknown reply type " + std::to_string(kind));
  r.kind = static_cast<Reply>(kind);
  switch (r.kind) {
    case Reply::Value:
      r.text = in.bytes(kMaxFrame, "the value");
      break;
    case Reply::Int:
      r.number = in.i64("the number");
      break;
    case Reply::Bool:
      r.number = in.u8("the flag");
      if (in.ok() && r.number > 1) in.fail("a flag of " + std::to_string(r.number) + " (must be 0 or 1)");
      break;
    case Reply::Timeout:
      r.keys = in.keys();
      break;
    case Reply::Error:
      r.text = in.bytes(kMaxMessageLength, "the error message");
      break;
    default:
      break;
  }
  if (!in.finish()) return set_why(why, std::string(reply_name(r.kind)) + " reply: " + in.why());
  *out = std::move(r);
  return true;
}

bool tokens_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer token is looked at; a length mismatch is folded into the result.
  size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace plrt::store
