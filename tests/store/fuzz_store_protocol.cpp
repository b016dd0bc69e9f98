// libFuzzer target over the store's decoders (runtime/src/store/protocol.cpp, compiled in alone).
// The input is read two ways: as one payload, and as a stream of frames.  Every message that
// decodes must encode back to exactly its input bytes and decode again to an equal message;
// anything else aborts (as do the sanitizers on a memory or UB error).
//
//   build/<dir>/bin/fuzz_store_protocol -max_total_time=60 <new-corpus-dir> tests/store/corpus
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "store/protocol.hpp"

namespace {

using namespace plrt::store;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_store_protocol: %s\n", what);
  std::abort();
}

template <class Msg, class Decode, class Encode>
void round_trip(const uint8_t* p, size_t n, Decode decode, Encode encode, const char* kind) {
  Msg m;
  std::string why;
  if (!decode(p, n, &m, &why)) {
    if (why.empty()) die("a rejected message without a reason");
    return;
  }
  std::string frame = encode(m);  // an exception here (a limit the decoder let through) aborts
  if (frame.size() != n + kHeaderSize || std::memcmp(frame.data() + kHeaderSize, p, n) != 0) {
    std::fprintf(stderr, "%s of %zu bytes re-encodes to %zu bytes\n", kind, n, frame.size() - kHeaderSize);
    die("round trip mismatch");
  }
  size_t len = 0;
  if (peek_frame(reinterpret_cast<const uint8_t*>(frame.data()), frame.size(), kMaxFrame, &len) !=
          FrameStatus::Complete ||
      len != n)
    die("the encoded frame's header is wrong");
  Msg again;
  if (!decode(reinterpret_cast<const uint8_t*>(frame.data()) + kHeaderSize, len, &again, &why))
    die("an encoded message does not decode");
  if (!(again == m)) die("decode(encode(m)) != m");
}

void check_payload(const uint8_t* p, size_t n) {
  round_trip<Request>(p, n, decode_request, encode_request, "request");
  round_trip<Response>(p, n, decode_response, encode_response, "response");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_payload(data, size);
  size_t off = 0;
  while (off < size) {
    size_t len = 0;
    FrameStatus st = peek_frame(data + off, size - off, kMaxHandshakeFrame, &len);
    if (st != FrameStatus::Complete) break;
    check_payload(data + off + kHeaderSize, len);
    off += kHeaderSize + len;
  }
  // tokens_equal must agree with ordinary comparison.
  size_t half = size / 2;
  std::string a(reinterpret_cast<const char*>(data), half);
  std::string b(reinterpret_cast<const char*>(data) + half, size - half);
  if (tokens_equal(a, b) != (a == b)) die("tokens_equal disagrees with ==");
  return 0;
}
