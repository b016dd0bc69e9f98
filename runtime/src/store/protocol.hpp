// The rendezvous store's wire format (docs/store-protocol.md): length-prefixed binary frames.
// Pure functions only -- no sockets, no logging, no runtime headers -- so that the libFuzzer target
// (tests/store/fuzz_store_protocol.cpp) and the tests can compile this file alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plrt::store {

inline constexpr uint32_t kMagic = 0x54534C50;  // the bytes "PLST" on the wire: the handshake's first field
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 4;                // u32 little-endian payload length
inline constexpr size_t kMaxFrame = size_t{64} << 20;   // payload bytes, after the handshake
inline constexpr size_t kMaxHandshakeFrame = 16 << 10;  // payload bytes, before it
inline constexpr size_t kMaxKeyLength = 4096;
inline constexpr size_t kMaxTokenLength = 4096;
inline constexpr size_t kMaxKeysPerRequest = 65536;    // check, wait, and a timeout's missing keys
inline constexpr size_t kMaxMessageLength = 64 << 10;  // an error response's text

enum class Op : uint8_t {
  Hello = 1,       // magic u32, version u16, token bytes
  Set = 2,         // key, value bytes
  Get = 3,         // key, timeout_ms i64 (> 0)
  Add = 4,         // key, delta i64
  CompareSet = 5,  // key, expected bytes, desired bytes
  Remove = 6,      // key
  Check = 7,       // keys
  Wait = 8,        // keys, timeout_ms i64 (> 0)
  NumKeys = 9      // nothing
};
const char* op_name(Op op);

struct Request {
  Op op = Op::NumKeys;
  uint16_t version = kProtocolVersion;  // Hello
  std::string key;                      // Set, Get, Add, CompareSet, Remove
  std::vector<std::string> keys;        // Check, Wait
  std::string value;                    // Set: the value; CompareSet: expected; Hello: the token
  std::string desired;                  // CompareSet
  int64_t number = 0;                   // Add: delta; Get, Wait: timeout in ms
};
bool operator==(const Request& a, const Request& b);

enum class Reply : uint8_t {
  Ok = 1,       // nothing (hello, set, wait)
  Value = 2,    // bytes (get, compare_set)
  Int = 3,      // i64 (add, num_keys)
  Bool = 4,     // u8 0 or 1 (remove, check)
  Timeout = 5,  // keys still missing (get, wait)
  Error = 6,    // message bytes (e.g. add on a value that is not a number; a refused version)
  BadToken = 7  // nothing; the server closes the connection after it
};
const char* reply_name(Reply kind);

struct Response {
  Reply kind = Reply::Ok;
  std::string text;               // Value: the value; Error: the message
  int64_t number = 0;             // Int; Bool (0 or 1)
  std::vector<std::string> keys;  // Timeout: the keys still missing
};
bool operator==(const Response& a, const Response& b);

// Looks at the start of a byte stream.  Complete: a whole frame is there, its payload size in
// *payload_size.  TooLarge: the header announces more than max_payload (*payload_size says how much).
enum class FrameStatus {
  NeedMore,
  Complete,
  TooLarge
};
FrameStatus peek_frame(const uint8_t* data, size_t size, size_t max_payload, size_t* payload_size);

// Whole frames (header + payload).  Throw std::length_error when a field exceeds its limit.
std::string encode_request(const Request& request);
std::string encode_response(const Response& response);

// Decode one payload (without its header).  Strict: every message has exactly one encoding, so
// decode-then-encode gives back the input frame.  On malformed input: false and the reason in *why.
bool decode_request(const uint8_t* payload, size_t size, Request* out, std::string* why);
bool decode_response(const uint8_t* payload, size_t size, Response* out, std::string* why);

// Compares two tokens in time that depends on their lengths only, not on where they differ.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace plrt::store
