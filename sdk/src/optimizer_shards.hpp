// Optimizer state in pieces (sharded checkpoints, ABI 1.5): a sharded strategy's ranks each keep
// the optimizer state of the element ranges they own, and each writes its own file
// (optimizer.rank<r>.safetensors) into the checkpoint; a ddp or single-device run writes one file
// (optimizer.safetensors) with whole-parameter state.  Loading at any world size and with any
// partition (reshard on load) is one rule: every piece "state.<i>[.<begin>-<end>].<field>" of
// every file is a range of parameter i's flat elements, and a rank takes from each file the
// elements that overlap the ranges it wants, one file at a time (it never holds more than one
// file and its own state).  OptimizerShards does that, pure and testable without a trainer;
// read_optimizer_files runs it over a checkpoint's files.
//
// Rules: a wanted range with no piece of a field at all gets no state for that field (the
// optimizer creates it at its first step, as for a parameter never stepped); a parameter whose
// wanted elements are covered in part (a gap), or twice (overlapping pieces), is an error naming
// the elements and the files; the per-range scalars (Adam's step) of the pieces covering one
// wanted range must agree; global scalars (lr, step) come from the first file (rank 0's).
#pragma once

#include <cstdint>
#include <map>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <vector>

namespace plrt::sdk {

// A parameter of the optimizer, as the reshard sees it.
struct ShardParam {
  std::string name;  // the module's name for it (messages)
  pl::Shape shape;   // its value's shape: a whole range's state has it
  PL_DType dtype = PL_F32;
};

// A parsed state name "state.<i>.<field>" (whole: begin 0, end -1 until resolved against the
// parameter) or "state.<i>.<begin>-<end>.<field>".
struct StateKey {
  size_t param = 0;
  bool whole = true;
  int64_t begin = 0, end = -1;
  std::string field;
};
// False for any other name (global scalars such as "lr", metadata).
bool parse_state_key(const std::string& key, StateKey* out);

// load_state's input.
struct OptimizerState {
  std::map<std::string, pl::Tensor> tensors;  // host tensors
  std::map<std::string, double> scalars;
};

class OptimizerShards {
 public:
  // `checkpoint`: the folder (messages).  `wanted`: this rank's ranges, optimizer indices into
  // `params`; each inside its parameter, no two overlapping (else pl::Error); empty ones ignored.
  OptimizerShards(std::string checkpoint, std::vector<ShardParam> params, std::vector<pl::ParamRange> wanted);

  // One file's pieces: state tensors (host or device) and per-range scalars, named as above
  // (scalars not named "state.…" are not pieces: pass them to set_global_scalars).  Copies the
  // elements that overlap the wanted ranges; nothing else is kept.  A name that is not a state
  // name, names a parameter the optimizer lacks or a range outside it, or a tensor whose dtype or
  // element count does not fit is an error naming the file and the name.
  void add(const std::string& file, const std::map<std::string, pl::Tensor>& tensors,
           const std::map<std::string, double>& range_scalars);
  void set_global_scalars(const std::map<std::string, double>& scalars) { global_ = scalars; }

  // After every file: checks coverage and agreement, then the state for exactly the wanted
  // ranges: a whole-parameter range as "state.<i>.<field>" (the parameter's shape), a partial one
  // as "state.<i>.<begin>-<end>.<field>" (flat).  Call once.
  OptimizerState finish();

 private:
  struct Cover {  // elements [begin, end) of a wanted range's field came from `key` of file `file`
    int64_t begin, end;
    size_t file;
    std::string key;
    double value;  // a scalar's
  };
  struct Slot {  // one field of one wanted range
    pl::Tensor data;
    std::vector<Cover> covers;
  };
  std::string where() const;  // "checkpoint <path>"
  std::string files_text() const;
  std::string param_text(size_t i) const;  // "parameter <i> (<name>)"
  // The wanted ranges overlapping [begin, end) of parameter i (indices into wanted_).
  std::vector<size_t> overlapping(size_t param, int64_t begin, int64_t end) const;
  void check_field(size_t param, const std::string& field, bool scalar);

  std::string checkpoint_;
  std::vector<ShardParam> params_;
  std::vector<pl::ParamRange> wanted_;
  std::vector<std::vector<size_t>> by_param_;  // wanted_ indices per parameter, sorted by begin
  std::vector<std::string> files_;
  std::map<std::pair<size_t, std::string>, Slot> tensors_, scalars_;  // (wanted index, field)
  std::map<std::string, double> global_;
};

// The file a rank writes its optimizer state to in a sharded checkpoint.
std::string optimizer_rank_file(int rank);

// Metadata keys of optimizer files that are not scalars.
inline constexpr const char* kOptimizerNameKey = "optimizer";
inline constexpr const char* kShardRankKey = "shard_rank";
inline constexpr const char* kShardWorldKey = "shard_world_size";

// An optimizer file's scalars (every metadata value but the keys above, as a number).  A value
// that is not a number throws PL_ERR_INVALID_ARGUMENT: "<source> is damaged: its scalar ...".
std::map<std::string, double> optimizer_scalars(const std::map<std::string, std::string>& metadata,
                                                const std::string& source);

// Reads `files` of checkpoint folder `dir` one at a time into an OptimizerShards (the first
// file's global scalars), checking that each exists, parses (scalars included), was written by
// `optimizer_name` and, for a rank file (files[r] == optimizer_rank_file(r)), names rank r of
// files.size().  Errors name the file.
OptimizerState read_optimizer_files(const std::string& dir, const std::vector<std::string>& files,
                                    const std::string& optimizer_name, std::vector<ShardParam> params,
                                    std::vector<pl::ParamRange> wanted);
// One file as saved, checked as above, all its scalars together (an optimizer every rank holds whole).
OptimizerState read_optimizer_file(const std::string& dir, const std::string& file, const std::string& optimizer_name);

}  // namespace plrt::sdk
