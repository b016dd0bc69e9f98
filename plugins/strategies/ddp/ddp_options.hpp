// The options of the ddp strategies (PL_StrategyConfig.options: the alias presets, then the
// user's; a later entry overrides an earlier one), with PyTorch DDP's names and defaults:
//   bucket_cap_mb        gradient bucket size in MiB, default 25
//   first_bucket_cap_mb  the first bucket's size in MiB, default 1 (PyTorch's
//                        _DEFAULT_FIRST_BUCKET_BYTES: a small first bucket starts communicating early)
//   broadcast_buffers    true|false, default true: buffers (parameters with requires_grad 0) are
//                        broadcast from rank 0 before every run_step, as DDP does every forward
//   pg.<name>            passed to the process group as <name> (e.g. pg.probe_ms)
#pragma once

#include <plrt/pl_abi.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace plrt::ddp {

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool broadcast_buffers = true;
  std::vector<std::pair<std::string, std::string>> pg_options;  // "pg." removed

  // MiB as PyTorch counts them (mb * 1024 * 1024, truncated), at least 1 byte.
  size_t bucket_cap_bytes() const { return mib_to_bytes(bucket_cap_mb); }
  size_t first_bucket_cap_bytes() const { return mib_to_bytes(first_bucket_cap_mb); }
  static size_t mib_to_bytes(double mb);
};

// One value, for ddp's parser and for strategies with options of their own (bagua): a number of MiB
// > 0 (at least one byte, at most 1 TiB), and a boolean (true/false, 1/0, yes/no, on/off).  A bad
// value throws plugin::Failure naming `key`, the value and what is valid (`fallback` as the default).
double parse_mb_option(const std::string& who, const char* key, const std::string& value, double fallback);
bool parse_bool_option(const std::string& who, const char* key, const std::string& value);

// The option names, for messages: "bucket_cap_mb, first_bucket_cap_mb, broadcast_buffers, pg.<name>".
std::string valid_option_names();

// Parses `list`; throws plugin::Failure naming an unknown option (listing the valid ones) or a bad
// value (with what is valid).  `who` begins every message ("ddp", "ddp_spawn").
DdpOptions parse_options(const std::string& who, const PL_OptionList& list);

// The same, for a strategy built on ddp with options of its own (ddp_sharded's stage): `extra`
// sees every key first and returns true when it took it (throwing on a bad value); an unknown key's
// message lists `extra_names` before ddp's.
using ExtraOption = std::function<bool(const std::string& key, const std::string& value)>;
DdpOptions parse_options(const std::string& who, const PL_OptionList& list, const ExtraOption& extra,
                         const std::string& extra_names);

}  // namespace plrt::ddp
