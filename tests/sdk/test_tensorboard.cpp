// TensorBoard's event files, byte by byte (sdk/src/tensorboard_writer.*): CRC-32C against its
// standard check values, one TFRecord's framing (expected bytes from an independent bitwise CRC-32C,
// tests/training/tfevents_check.py), a scalar Event's protobuf encoding derived by hand from
// event.proto / summary.proto; the logger names (sdk/src/loggers.*) and hparams.yaml's text.
// The whole file, read by an independent reader after a real run: tests/training/test_loggers.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lightning_module.hpp>
#include <string>

#include "hparams_yaml.hpp"
#include "loggers.hpp"
#include "tensorboard_writer.hpp"

namespace {

namespace tb = plrt::sdk::tensorboard;
using ::testing::HasSubstr;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValues) {
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);            // the CRC catalogue's check value
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(tb::crc32c(""), 0u);
  EXPECT_EQ(tb::masked_crc32c(""), 0xa282ead8u);  // mask(0) is the mask's delta
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(tb::masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, OneRecordIsLengthCrcDataCrc) {
  // 05 00.. (uint64 5), masked CRC-32C of those 8 bytes, "hello", masked CRC-32C of "hello"
  const std::string want =
      bytes({0x05, 0, 0, 0, 0, 0, 0, 0, 0xea, 0xb2, 0x04, 0x3e, 'h', 'e', 'l', 'l', 'o', 0xbb, 0x1f, 0x1c, 0x19});
  EXPECT_EQ(tb::frame_record("hello"), want);
  const std::string big(300, 'x');
  const std::string r = tb::frame_record(big);
  ASSERT_EQ(r.size(), 316u);
  EXPECT_EQ(r.substr(0, 8), bytes({0x2c, 0x01, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r.substr(12, 300), big);
}

TEST(TensorBoard, ScalarEventEncodesWallTimeStepAndSummaryValue) {
  // Event{wall_time=1.5 (field 1, fixed64), step=7 (field 2, varint), summary (field 5) =
  //   Summary{value (field 1) = Value{tag="loss" (field 1), simple_value=0.5f (field 2, fixed32)}}}
  const std::string value = bytes({0x0a, 0x04, 'l', 'o', 's', 's', 0x15, 0x00, 0x00, 0x00, 0x3f});
  const std::string summary = bytes({0x0a, 0x0b}) + value;
  const std::string want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x07, 0x2a, 0x0d}) + summary;
  EXPECT_EQ(tb::scalar_event(1.5, 7, "loss", 0.5f), want);
  // step 300: two varint bytes; a negative step: ten (two's complement)
  EXPECT_EQ(tb::scalar_event(1.5, 300, "loss", 0.5f).substr(9, 3), bytes({0x10, 0xac, 0x02}));
  EXPECT_EQ(tb::scalar_event(1.5, -1, "loss", 0.5f).substr(9, 11),
            bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(TensorBoard, FirstEventIsTheFileVersion) {
  const std::string v = "brain.Event:2";
  EXPECT_EQ(tb::file_version_event(2.0, v), bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x1a, 0x0d}) + v);
}

TEST(TensorBoard, WriterMakesTheFileAndFlushesWholeRecords) {
  char tmpl[] = "/tmp/plrt-tb-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::string path;
  {
    tb::EventWriter w;
    w.open(dir);
    path = w.path();
    EXPECT_THAT(path, HasSubstr(dir + "/events.out.tfevents."));
    w.add_scalar("loss", 0.25, 3, 10.0);
    w.flush();
    std::ifstream in(path, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string second = tb::frame_record(tb::scalar_event(10.0, 3, "loss", 0.25f));
    ASSERT_GT(all.size(), second.size());
    EXPECT_EQ(all.substr(all.size() - second.size()), second);
    EXPECT_EQ(all.substr(12 + 9, 3), bytes({0x1a, 0x0d, 'b'}));  // the first record: file_version
  }
  std::filesystem::remove_all(dir);
  tb::EventWriter w;
  EXPECT_THROW(w.open(dir + "/no/such/folder"), pl::Error);
}

TEST(Loggers, NamesAreCheckedNamingTheValidOnes) {
  EXPECT_EQ(plrt::sdk::parse_logger_names("csv", "logger"), std::vector<std::string>{"csv"});
  EXPECT_EQ(plrt::sdk::parse_logger_names("tensorboard,csv", "logger"),
            (std::vector<std::string>{"tensorboard", "csv"}));
  for (const std::string bad : {"", "csv,", ",csv", "csv,,tensorboard", "wandb", "CSV", "csv,csv", "csv tensorboard"}) {
    try {
      plrt::sdk::parse_logger_names(bad, "PL_TRAINER_LOGGER");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const pl::Error& e) {
      EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << bad;
      EXPECT_THAT(e.what(), HasSubstr("PL_TRAINER_LOGGER='" + bad + "'"));
      EXPECT_THAT(e.what(), HasSubstr("csv, tensorboard"));
    }
  }
}

TEST(HParams, YamlQuotesStringsAndKeepsFloatsFloats) {
  const pl::HParams module{{"lr", 1e-05},         {"hidden", "16,12"},
                           {"layers", 3},         {"nesterov", false},
                           {"yes", "no"},         {"odd key", "a \"quoted\"\nline"},
                           {"big", 2.0},          {"inf", std::numeric_limits<double>::infinity()},
                           {"nan", std::nan("")}, {"neg", -0.5}};
  const pl::HParams trainer{{"strategy", "ddp"}, {"world_size", 2}};
  EXPECT_EQ(plrt::sdk::hparams_yaml(module, trainer),
            "big: 2.0\n"
            "hidden: \"16,12\"\n"
            "inf: .inf\n"
            "layers: 3\n"
            "lr: 1.0e-05\n"
            "nan: .nan\n"
            "neg: -0.5\n"
            "nesterov: false\n"
            "\"odd key\": \"a \\\"quoted\\\"\\nline\"\n"
            "\"yes\": \"no\"\n"
            "trainer:\n"
            "  strategy: \"ddp\"\n"
            "  world_size: 2\n");
}

struct Plain : pl::LightningModule {
  pl::Scalar training_step(const pl::Batch&, int64_t) override { return 0; }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override { return nullptr; }
};

TEST(HParams, SaveHyperparametersMergesAndRefusesReservedNames) {
  Plain m;
  m.save_hyperparameters({{"lr", 0.1}, {"name", "mlp"}});
  m.save_hyperparameters({{"lr", 0.2}});
  EXPECT_EQ(m.hparams().at("lr"), pl::HParam(0.2));
  EXPECT_EQ(m.hparams().at("name"), pl::HParam("mlp"));
  EXPECT_EQ(m.hparams().at("name").value().index(), 3u);  // a string, not a bool
  for (const std::string bad : {"", "trainer"}) {
    try {
      m.save_hyperparameters({{bad, 1}});
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const pl::Error& e) {
      EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr("'" + bad + "'"));
    }
  }
  EXPECT_EQ(m.hparams().size(), 2u);
}

}  // namespace
