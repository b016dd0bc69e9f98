#include "bagua_options.hpp"

#include "config_checks.hpp"
#include "plugin_support.hpp"

namespace plrt::bagua {

using plugin::fail;

namespace {

constexpr double kDefaultBucketMb = 10.0;  // Bagua's bucket_size default

const char* const kValid = "algorithm, average, bucket_size_mb, pg.<name> (passed to the process group)";

}  // namespace

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kGradientAllreduce:
      return "gradient_allreduce";
  }
  return "?";
}

BaguaOptions parse_options(const std::string& who, const PL_OptionList& list) {
  BaguaOptions o;
  o.ddp.bucket_cap_mb = o.ddp.first_bucket_cap_mb = kDefaultBucketMb;
  strategy::for_each_option(who, list, [&](const std::string& key, const std::string& value) {
    if (key == "algorithm") {
      if (value != "gradient_allreduce")
        fail(PL_ERR_INVALID_ARGUMENT, who + ": option algorithm='" + value +
                                          "' is not valid: the algorithms built are gradient_allreduce (default); "
                                          "docs/bagua.md specifies the others");
      o.algorithm = Algorithm::kGradientAllreduce;
    } else if (key == "average") {
      o.average = ddp::parse_bool_option(who, "average", value);
    } else if (key == "bucket_size_mb") {
      o.ddp.bucket_cap_mb = o.ddp.first_bucket_cap_mb =
          ddp::parse_mb_option(who, "bucket_size_mb", value, kDefaultBucketMb);
    } else if (key.rfind("pg.", 0) == 0 && key.size() > 3) {
      o.ddp.pg_options.emplace_back(key.substr(3), value);
    } else {
      fail(PL_ERR_INVALID_ARGUMENT, who + ": unknown option '" + key + "'; valid options: " + kValid);
    }
  });
  return o;
}

}  // namespace plrt::bagua
