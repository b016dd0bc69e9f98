// Strategy options as text (plrt/sdk/options.hpp): KEY=VALUE from a command line, the later-wins
// rule, and PL_TRAINER_STRATEGY_OPTIONS's JSON, which must carry any value and refuse anything else
// with the variable's name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/error.hpp>
#include <plrt/sdk/options.hpp>

#include "unit_support.hpp"

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

using plrt_test::invalid_message;  // unit_support.hpp

TEST(StrategyOptionText, KeyEqualsValueSplitsAtTheFirstEquals) {
  EXPECT_EQ(pl::parse_option_assignment("--strategy-option", "bucket_cap_mb=10"),
            std::make_pair(std::string("bucket_cap_mb"), std::string("10")));
  EXPECT_EQ(pl::parse_option_assignment("--strategy-option", "pg.note=a=b"),
            std::make_pair(std::string("pg.note"), std::string("a=b")));
  EXPECT_EQ(pl::parse_option_assignment("--strategy-option", "k="), std::make_pair(std::string("k"), std::string()));
  EXPECT_THAT(invalid_message([] { pl::parse_option_assignment("--strategy-option", "stage"); }),
              AllOf(HasSubstr("--strategy-option 'stage' is not valid: it has no '='"), HasSubstr("KEY=VALUE")));
  EXPECT_THAT(invalid_message([] { pl::parse_option_assignment("--strategy-option", "=1"); }),
              AllOf(HasSubstr("--strategy-option '=1' is not valid: the key is empty"), HasSubstr("KEY=VALUE")));
}

TEST(StrategyOptionText, ALaterEntryOverridesAnEarlierOne) {
  pl::OptionList l = {{"a", "1"}, {"b", "2"}};
  pl::set_option(l, "a", "3");
  pl::set_option(l, "c", "4");
  EXPECT_THAT(l, ElementsAre(Pair("b", "2"), Pair("a", "3"), Pair("c", "4")));
  EXPECT_EQ(pl::encode_options({{"x", "1"}, {"y", "2"}, {"x", "5"}}), R"({"y":"2","x":"5"})");
}

TEST(StrategyOptionText, TheVariableCarriesAnyValue) {
  const pl::OptionList l = {{"pg.note", "a \"quoted\" = value, with commas; {braces} and \\ and \xc3\xa9"},
                            {"empty", ""},
                            {"bucket_cap_mb", "0.5"}};
  EXPECT_EQ(pl::decode_options(pl::kStrategyOptionsVariable, pl::encode_options(l)), l);
  EXPECT_TRUE(pl::decode_options("V", "{}").empty());
}

TEST(StrategyOptionText, AMalformedVariableIsNamed) {
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"bucket_cap_mb=10", "not JSON"},
           {R"(["a", "b"])", "it is a JSON array, not an object"},
           {R"({"a": 1})", "the value of 'a' is a number, not a string"},
           {R"({"a": null})", "the value of 'a' is a null, not a string"},
           {R"({"": "1"})", "a key is empty"},
       }) {
    SCOPED_TRACE(text);
    EXPECT_THAT(invalid_message([&] { pl::decode_options("PL_TRAINER_STRATEGY_OPTIONS", text); }),
                AllOf(HasSubstr("PL_TRAINER_STRATEGY_OPTIONS='" + text + "' is not valid: " + why),
                      HasSubstr("a JSON object of strings")));
  }
}
