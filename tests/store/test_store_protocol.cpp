// The wire format alone (runtime/src/store/protocol.cpp, compiled into this test): round trips,
// strictness, limits, and deterministic random garbage (the libFuzzer target goes further where
// clang is available).
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "store/protocol.hpp"

namespace {

using namespace plrt::store;

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::vector<Request> sample_requests() {
  std::vector<Request> out;
  auto add = [&](Op op, std::string key, int64_t number = 0) -> Request& {
    Request r;
    r.op = op;
    r.key = std::move(key);
    r.number = number;
    out.push_back(r);
    return out.back();
  };
  add(Op::Hello, "").value = "token";
  add(Op::Hello, "").version = 7;
  add(Op::Set, "k").value = std::string("v\0w", 3);
  add(Op::Set, "");
  add(Op::Get, "key", 1);
  add(Op::Get, std::string(kMaxKeyLength, 'g'), INT64_MAX);
  add(Op::Add, "c", -5);
  add(Op::Add, "c", INT64_MIN);
  Request& cs = add(Op::CompareSet, "cs");
  cs.value = "old";
  cs.desired = "new";
  add(Op::Remove, "r");
  add(Op::Check, "").keys = {"a", "", "c"};
  add(Op::Check, "");
  add(Op::Wait, "", 300000).keys = {"x"};
  add(Op::NumKeys, "");
  return out;
}

std::vector<Response> sample_responses() {
  return {{Reply::Ok, "", 0, {}},       {Reply::Value, std::string("\0\1", 2), 0, {}},
          {Reply::Int, "", -42, {}},    {Reply::Bool, "", 1, {}},
          {Reply::Bool, "", 0, {}},     {Reply::Timeout, "", 0, {"a", "b"}},
          {Reply::Error, "bad", 0, {}}, {Reply::BadToken, "", 0, {}}};
}

// Decoding `payload` either fails, or gives a message that encodes back to exactly those bytes.
template <class Msg, class Decode, class Encode>
bool check_round_trip(const std::string& payload, Decode decode, Encode encode) {
  Msg m;
  std::string why;
  if (!decode(bytes(payload), payload.size(), &m, &why)) {
    EXPECT_FALSE(why.empty());
    return false;
  }
  std::string again = encode(m);
  EXPECT_EQ(again.substr(kHeaderSize), payload);
  return true;
}

bool probe(const std::string& payload) {
  bool a = check_round_trip<Request>(payload, decode_request, encode_request);
  bool b = check_round_trip<Response>(payload, decode_response, encode_response);
  return a || b;
}

TEST(StoreProtocol, EveryMessageRoundTrips) {
  for (const auto& r : sample_requests()) {
    std::string f = encode_request(r);
    size_t len = 0;
    ASSERT_EQ(peek_frame(bytes(f), f.size(), kMaxFrame, &len), FrameStatus::Complete);
    ASSERT_EQ(len + kHeaderSize, f.size());
    Request d;
    std::string why;
    ASSERT_TRUE(decode_request(bytes(f) + kHeaderSize, len, &d, &why)) << op_name(r.op) << ": " << why;
    EXPECT_TRUE(d == r) << op_name(r.op);
    EXPECT_EQ(encode_request(d), f);
  }
  for (const auto& r : sample_responses()) {
    std::string f = encode_response(r);
    Response d;
    std::string why;
    ASSERT_TRUE(decode_response(bytes(f) + kHeaderSize, f.size() - kHeaderSize, &d, &why)) << why;
    EXPECT_TRUE(d == r) << reply_name(r.kind);
  }
}

TEST(StoreProtocol, EveryTruncationAndEveryExtraByteIsRejected) {
  std::vector<std::string> payloads;
  for (const auto& r : sample_requests()) payloads.push_back(encode_request(r).substr(kHeaderSize));
  for (const auto& p : payloads) {
    Request d;
    std::string why;
    for (size_t n = 0; n < p.size(); ++n)
      EXPECT_FALSE(decode_request(bytes(p), n, &d, &why)) << "prefix of " << n << " bytes decoded";
    std::string longer = p + "x";
    EXPECT_FALSE(decode_request(bytes(longer), longer.size(), &d, &why));
    EXPECT_NE(why.find("unexpected bytes after the message"), std::string::npos) << why;
  }
}

TEST(StoreProtocol, FramesAndLimits) {
  size_t len = 0;
  EXPECT_EQ(peek_frame(nullptr, 0, kMaxFrame, &len), FrameStatus::NeedMore);
  std::string header(
      "\x05\x00\x00\x00"
      "abc",
      7);
  EXPECT_EQ(peek_frame(bytes(header), header.size(), kMaxFrame, &len), FrameStatus::NeedMore);
  EXPECT_EQ(len, 5u);
  std::string huge("\x01\x00\x00\x04", 4);  // 64 MiB + 1
  EXPECT_EQ(peek_frame(bytes(huge), huge.size(), kMaxFrame, &len), FrameStatus::TooLarge);
  EXPECT_EQ(len, kMaxFrame + 1);

  Request r;
  r.op = Op::Get;
  r.key = std::string(kMaxKeyLength + 1, 'k');
  r.number = 1;
  EXPECT_THROW(encode_request(r), std::length_error);
  r.key = "k";
  r.number = 0;
  EXPECT_THROW(encode_request(r), std::invalid_argument);

  // A key length over the limit, and a key count that cannot fit, are refused before allocating.
  std::string why;
  Request d;
  std::string long_key("\x06\x01\x10\x00\x00", 5);  // remove, key of 4097 bytes
  EXPECT_FALSE(decode_request(bytes(long_key), long_key.size(), &d, &why));
  EXPECT_EQ(why, "remove request: the key of 4097 bytes exceeds the limit of 4096");
  std::string many_keys("\x07\xff\xff\x00\x00", 5);  // check, 65535 keys, no bytes
  EXPECT_FALSE(decode_request(bytes(many_keys), many_keys.size(), &d, &why));
  EXPECT_EQ(why, "check request: a key count of 65535 does not fit in the 0 bytes left");
  std::string too_many("\x07\x01\x00\x01\x00", 5);
  EXPECT_FALSE(decode_request(bytes(too_many), too_many.size(), &d, &why));
  EXPECT_EQ(why, "check request: a key count of 65537 exceeds the limit of 65536");
  std::string bool2("\x04\x02", 2);
  Response resp;
  EXPECT_FALSE(decode_response(bytes(bool2), bool2.size(), &resp, &why));
  EXPECT_EQ(why, "bool reply: a flag of 2 (must be 0 or 1)");
  EXPECT_FALSE(decode_request(nullptr, 0, &d, &why));
  EXPECT_EQ(why, "an empty message");
}

TEST(StoreProtocol, TokensCompare) {
  EXPECT_TRUE(tokens_equal("", ""));
  EXPECT_TRUE(tokens_equal("secret", "secret"));
  EXPECT_FALSE(tokens_equal("secret", "secreT"));
  EXPECT_FALSE(tokens_equal("secret", "secret2"));
  EXPECT_FALSE(tokens_equal("", "x"));
  EXPECT_FALSE(tokens_equal(std::string("a\0", 2), "a"));
}

// Always runs (no clang needed): random buffers, and random mutations of valid messages.
TEST(StoreProtocol, RandomGarbageNeverCrashesAndDecodedMessagesRoundTrip) {
  std::mt19937_64 gen(20240611);
  int decoded = 0;
  for (int i = 0; i < 100000; ++i) {
    std::string p(gen() % 48, '\0');
    for (auto& c : p) c = static_cast<char>(gen() % 4 == 0 ? gen() % 10 : gen());
    if (!p.empty() && gen() % 2) p[0] = static_cast<char>(1 + gen() % 9);  // mostly valid types
    decoded += probe(p);
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<std::string> valid;
  for (const auto& r : sample_requests()) valid.push_back(encode_request(r).substr(kHeaderSize));
  for (const auto& r : sample_responses()) valid.push_back(encode_response(r).substr(kHeaderSize));
  for (int i = 0; i < 100000; ++i) {
    std::string p = valid[gen() % valid.size()];
    switch (gen() % 4) {
      case 0:
        if (!p.empty()) p[gen() % p.size()] = static_cast<char>(gen());
        break;
      case 1:
        p.resize(gen() % (p.size() + 1));
        break;
      case 2:
        p.insert(gen() % (p.size() + 1), 1, static_cast<char>(gen()));
        break;
      default:
        if (!p.empty()) p[gen() % p.size()] ^= static_cast<char>(1 << (gen() % 8));
        break;
    }
    decoded += probe(p);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(decoded, 1000);  // the generator does reach the decoders' success paths
}

// The fuzzer's seed corpus: each file is a stream of valid frames.
TEST(StoreProtocol, SeedCorpusHoldsValidFrames) {
  DIR* dir = ::opendir(PLRT_STORE_CORPUS_DIR);
  ASSERT_NE(dir, nullptr) << PLRT_STORE_CORPUS_DIR;
  int files = 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string(PLRT_STORE_CORPUS_DIR) + "/" + e->d_name, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    size_t off = 0, frames = 0;
    while (off < data.size()) {
      size_t len = 0;
      ASSERT_EQ(peek_frame(bytes(data) + off, data.size() - off, kMaxFrame, &len), FrameStatus::Complete) << e->d_name;
      EXPECT_TRUE(probe(data.substr(off + kHeaderSize, len))) << e->d_name << " frame " << frames;
      off += kHeaderSize + len;
      ++frames;
    }
    EXPECT_GT(frames, 0u) << e->d_name;
  }
  ::closedir(dir);
  EXPECT_GE(files, 5);
}

}  // namespace
