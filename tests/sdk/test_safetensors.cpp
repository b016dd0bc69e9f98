// pl::safetensors: round trips of every dtype, a byte string written by hand from the format's
// description, and one test per kind of malformed file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::error_or_none;

namespace st = pl::safetensors;

// A tensor whose bytes are a pattern depending on `salt`: any misplaced byte shows.
pl::Tensor patterned(pl::Shape shape, PL_DType dtype, int salt) {
  pl::Tensor t = pl::Tensor::empty(std::move(shape), dtype);
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 31 + salt * 7 + 1);
  return t;
}

std::string bytes_of(const pl::Tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

// A file: the 8-byte little-endian length of `header`, the header, the buffer.
std::string file_of(const std::string& header, const std::string& buffer) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + buffer;
}

TEST(Safetensors, DtypeNames) {
  for (PL_DType d : {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8})
    EXPECT_EQ(st::dtype_from_name(st::dtype_name(d)), d);
  EXPECT_EQ(st::dtype_name(PL_BF16), "BF16");
  EXPECT_EQ(st::dtype_from_name("I64"), PL_I64);
  std::string e = error_or_none([] { st::dtype_from_name("f32"); });
  EXPECT_NE(e.find("\"f32\""), std::string::npos) << e;
  EXPECT_NE(e.find("F32, F64, F16, BF16, I32, I64, U8"), std::string::npos) << e;
  EXPECT_NE(error_or_none([] { st::dtype_name(PL_DTYPE_INVALID); }).find("dtype 0"), std::string::npos);
}

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  std::vector<std::pair<std::string, pl::Tensor>> tensors;
  int salt = 0;
  for (PL_DType d : {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8})
    for (const pl::Shape& shape : {pl::Shape{}, pl::Shape{0}, pl::Shape{5}, pl::Shape{2, 0, 4}, pl::Shape{2, 3, 1}})
      tensors.emplace_back(st::dtype_name(d) + "/" + pl::shape_text(shape), patterned(shape, d, ++salt));
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "\xc3\xbcn\"quoted\"\n\\"}};
  const std::string bytes = st::serialize(tensors, meta);

  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "the header is padded to a multiple of 8 bytes";

  st::File f = st::parse(bytes);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_EQ(f.tensors.count(name), 1u) << name;
    const pl::Tensor& got = f.tensors.at(name);
    EXPECT_EQ(got.dtype(), t.dtype()) << name;
    EXPECT_EQ(got.shape(), t.shape()) << name;
    EXPECT_TRUE(got.is_host());
    EXPECT_EQ(bytes_of(got), bytes_of(t)) << name;
  }
  // Nothing at all, and no metadata: an empty object (padded).
  st::File empty = st::parse(st::serialize({}));
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_TRUE(empty.metadata.empty());
  EXPECT_EQ(st::serialize({}), file_of("{}      ", ""));
}

TEST(Safetensors, MatchesAFileWrittenByHandFromTheSpec) {
  // w: F32 [2] = {1, -2}; b: U8 scalar 7; metadata k=v.  Header: metadata first, then the
  // tensors in order, fields dtype/shape/data_offsets; 130 bytes + 6 spaces = 136 = 0x88.
  const std::string golden = std::string("\x88\0\0\0\0\0\0\0", 8) +
                             "{\"__metadata__\":{\"k\":\"v\"},"
                             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[8,9]}}      " +
                             std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07", 9);
  std::vector<std::pair<std::string, pl::Tensor>> tensors{{"w", pl::Tensor::from_vector<float>({1, -2}, {2})},
                                                          {"b", pl::Tensor::from_vector<uint8_t>({7}, {})}};
  EXPECT_EQ(st::serialize(tensors, {{"k", "v"}}), golden);

  st::File f = st::parse(golden);
  EXPECT_EQ(f.tensors.at("w").to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(f.tensors.at("b").shape(), pl::Shape{});
  EXPECT_EQ(f.tensors.at("b").to_vector<uint8_t>(), std::vector<uint8_t>{7});
  EXPECT_EQ(f.metadata.at("k"), "v");

  // Another writer's freedom: any key order, whitespace, no padding, buffer order unlike header
  // order, unaligned offsets.
  std::string other = file_of(
      " { \"w\" : {\"shape\":[2], \"data_offsets\":[1,9], \"dtype\":\"F32\"},\n"
      "   \"b\": {\"data_offsets\":[0,1],\"dtype\":\"U8\",\"shape\":[]} }",
      std::string("\x07\x00\x00\x80\x3f\x00\x00\x00\xc0", 9));
  st::File g = st::parse(other);
  EXPECT_EQ(g.tensors.at("w").to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(g.tensors.at("b").to_vector<uint8_t>(), std::vector<uint8_t>{7});
}

struct Malformed {
  std::string what, bytes, message;
};

TEST(Safetensors, MalformedFilesNameTheProblemAndTheSource) {
  const std::string f4 = "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":";
  std::string huge(8, '\0');
  huge[0] = '\x01', huge[1] = '\xe1', huge[2] = '\xf5', huge[3] = '\x05';  // 100000001
  const std::vector<Malformed> cases = {
      {"short", std::string("\x02\0\0", 3), "too short for the 8-byte header length"},
      {"huge header", huge + "{}", "header length 100000001 exceeds the limit of 100000000"},
      {"truncated", file_of("{\"a\":1}", "").substr(0, 12), "header length 7 exceeds the 4 bytes that follow"},
      {"not json", file_of("{\"a\":", ""), "the header is not valid JSON"},
      {"not utf-8", file_of("{\"\xff\":{}}", ""), "the header is not valid JSON"},
      {"not an object", file_of("[1,2]", ""), "the header must be a JSON object, not array"},
      {"entry not object", file_of("{\"a\":5}", ""), "tensor 'a' must be an object"},
      {"no dtype", file_of("{\"a\":{\"shape\":[],\"data_offsets\":[0,4]}}", "1234"),
       "tensor 'a' has no \"dtype\" field"},
      {"no shape", file_of("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "1234"), "has no \"shape\" field"},
      {"no offsets", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", "1234"), "has no \"data_offsets\" field"},
      {"dtype type", file_of("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", "1234"),
       "dtype must be a string, not 4"},
      {"unknown dtype", file_of("{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,4]}}", "1234"),
       "unknown dtype \"F8\" (valid: F32, F64, F16, BF16, I32, I64, U8)"},
      {"shape type", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", "1234"),
       "shape must be an array, not 3"},
      {"negative shape", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "1234"),
       "shape entry is negative (-1)"},
      {"fractional shape", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "1234"),
       "shape entry must be a non-negative integer, not 1.5"},
      {"too many dims", file_of("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", "1"),
       "has 9 dimensions, at most 8"},
      {"overflowing shape",
       file_of("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", "1"),
       "overflows 64 bits"},
      {"offsets arity", file_of("{\"a\":" + f4 + "[0]}}", "1234"),
       "data_offsets must be an array [begin, end], not [0]"},
      {"negative offset", file_of("{\"a\":" + f4 + "[-4,0]}}", "1234"), "data_offsets begin is negative (-4)"},
      {"end before begin", file_of("{\"a\":" + f4 + "[4,0]}}", "1234"), "data_offsets [4,0] end before begin"},
      {"size mismatch", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "1234"),
       "data_offsets [0,4] span 4 bytes but F32 [2] needs 8"},
      {"out of bounds", file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "1234"),
       "data_offsets [0,8] fall outside the 4-byte buffer"},
      {"overlap", file_of("{\"a\":" + f4 + "[0,4]},\"b\":" + f4 + "[2,6]}}", "123456"),
       "tensor 'b' at bytes [2, 6) overlaps tensor 'a' ending at 4"},
      {"gap", file_of("{\"a\":" + f4 + "[0,4]},\"b\":" + f4 + "[8,12]}}", "123456789012"),
       "a gap: bytes [4, 8) before tensor 'b' belong to no tensor"},
      {"trailing bytes", file_of("{\"a\":" + f4 + "[0,4]}}", "123456"),
       "a gap: bytes [4, 6) at the end of the buffer belong to no tensor"},
      {"duplicate name", file_of("{\"a\":" + f4 + "[0,4]},\"a\":" + f4 + "[4,8]}}", "12345678"),
       "the header names \"a\" twice"},
      {"metadata type", file_of("{\"__metadata__\":[1]}", ""), "__metadata__ must be an object of strings, not [1]"},
      {"metadata value", file_of("{\"__metadata__\":{\"epoch\":3}}", ""),
       "__metadata__ value of 'epoch' must be a string, not 3"},
  };
  for (const Malformed& c : cases) {
    std::string e = error_or_none([&] { st::parse(c.bytes, "dir/model.safetensors"); });
    EXPECT_NE(e.find("safetensors 'dir/model.safetensors': "), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find(c.message), std::string::npos) << c.what << ": " << e;
  }
}

TEST(Safetensors, SerializeRejectsBadTensors) {
  pl::Tensor t = pl::Tensor::zeros({2});
  EXPECT_NE(error_or_none([&] { st::serialize({{"a", t}, {"a", t}}); }).find("'a' appears twice"), std::string::npos);
  EXPECT_NE(error_or_none([&] { st::serialize({{"__metadata__", t}}); }).find("reserved"), std::string::npos);
  EXPECT_NE(error_or_none([&] {
              st::serialize({{"u", pl::Tensor()}});
            }).find("tensor 'u' is undefined"),
            std::string::npos);
  EXPECT_NE(error_or_none([&] { st::serialize({{"bad\xff", t}}); }).find("is not valid UTF-8"), std::string::npos);
}

TEST(Safetensors, SaveAndLoadNameThePath) {
  std::string dir = ::testing::TempDir() + "plrt_st_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/m.safetensors";
  st::save(path, {{"x", pl::Tensor::from_vector<int64_t>({1, 2, 3}, {3})}}, {{"step", "7"}});
  st::File f = st::load(path);
  EXPECT_EQ(f.tensors.at("x").to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f.metadata.at("step"), "7");

  std::string e = error_or_none([&] { st::load(dir + "/missing.safetensors"); });
  EXPECT_NE(e.find(dir + "/missing.safetensors"), std::string::npos) << e;
  pl::write_file_atomic(path, file_of("{\"a\":3}", ""));
  e = error_or_none([&] { st::load(path); });
  EXPECT_NE(e.find("safetensors '" + path + "': tensor 'a'"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

}  // namespace
