#include "op_args.hpp"

#include <cstdio>
#include <cstdlib>

#include "pg_entry.hpp"

namespace plrt::pg {

using plugin::fail;

[[noreturn]] void broken_call(const char* backend, const char* fn) {
  std::fprintf(stderr, "plrt %s process group: %s called with a NULL process group; aborting\n", backend, fn);
  std::abort();
}

OpDesc allreduce_args(const PL_Tensor* tensor, PL_ReduceOp op, const std::string& where, const TensorCheck& check) {
  check(tensor, "tensor");
  check_reduce_op(op, where);
  OpDesc d;
  d.kind = OpKind::kAllreduce;
  d.reduce = op;
  d.dtype = tensor->dtype;
  d.count = tensor->numel;
  return d;
}

OpDesc broadcast_args(const PL_Tensor* tensor, int32_t root, GroupShape g, const std::string& where,
                      const TensorCheck& check) {
  check(tensor, "tensor");
  check_rank_arg(root, where, "root", g.world, g.rank, false);
  OpDesc d;
  d.kind = OpKind::kBroadcast;
  d.dtype = tensor->dtype;
  d.peer = root;
  d.count = tensor->numel;
  return d;
}

OpDesc allgather_args(const PL_Tensor* input, const PL_Tensor* outputs, size_t num_outputs, GroupShape g,
                      const std::string& w, const TensorCheck& check) {
  check(input, "input");
  if (outputs == nullptr) fail(PL_ERR_INVALID_ARGUMENT, w + ": outputs is NULL");
  if (num_outputs != static_cast<size_t>(g.world))
    fail(PL_ERR_INVALID_ARGUMENT, w + ": num_outputs is " + std::to_string(num_outputs) + ", but the group has " +
                                      std::to_string(g.world) +
                                      " ranks: pass one output per rank "
                                      "(outputs[r] receives rank r's input)");
  OpDesc d;
  d.kind = OpKind::kAllgather;
  d.dtype = input->dtype;
  for (size_t r = 0; r < num_outputs; ++r) {
    const std::string name = "outputs[" + std::to_string(r) + "]";
    check(&outputs[r], name.c_str());
    check_same_dtype(*input, outputs[r], w, "input", name.c_str());
    d.counts.push_back(outputs[r].numel);
  }
  if (outputs[g.rank].numel != input->numel)
    fail(PL_ERR_INVALID_ARGUMENT, w + ": outputs[" + std::to_string(g.rank) + "] has " +
                                      std::to_string(outputs[g.rank].numel) + " elements but the input has " +
                                      std::to_string(input->numel) + ": this rank's output receives its own input");
  return d;
}

OpDesc reduce_scatter_args(const PL_Tensor* inputs, size_t num_inputs, const PL_Tensor* output, PL_ReduceOp op,
                           GroupShape g, const std::string& w, const TensorCheck& check) {
  check(output, "output");
  check_reduce_op(op, w);
  if (inputs == nullptr) fail(PL_ERR_INVALID_ARGUMENT, w + ": inputs is NULL");
  if (num_inputs != static_cast<size_t>(g.world))
    fail(PL_ERR_INVALID_ARGUMENT, w + ": num_inputs is " + std::to_string(num_inputs) + ", but the group has " +
                                      std::to_string(g.world) +
                                      " ranks: pass one input per rank "
                                      "(rank r's output is the reduction of every rank's inputs[r])");
  OpDesc d;
  d.kind = OpKind::kReduceScatter;
  d.reduce = op;
  d.dtype = output->dtype;
  for (size_t r = 0; r < num_inputs; ++r) {
    const std::string name = "inputs[" + std::to_string(r) + "]";
    check(&inputs[r], name.c_str());
    check_same_dtype(*output, inputs[r], w, "output", name.c_str());
    d.counts.push_back(inputs[r].numel);
  }
  if (output->numel != inputs[g.rank].numel)
    fail(PL_ERR_INVALID_ARGUMENT, w + ": output has " + std::to_string(output->numel) + " elements but inputs[" +
                                      std::to_string(g.rank) + "] has " + std::to_string(inputs[g.rank].numel) +
                                      ": this rank's output is the reduction of inputs[" + std::to_string(g.rank) +
                                      "]");
  return d;
}

namespace {

std::string device_name(PL_Device d) {
  const char* t = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : nullptr;
  return (t ? std::string(t) : "device type " + std::to_string(d.type)) + ":" + std::to_string(d.index);
}

// One side's counts: checked against the tensor, or equal chunks when `given` is NULL.
std::vector<int64_t> chunk_counts(const int64_t* given, const PL_Tensor& t, const char* tensor, const char* name,
                                  GroupShape g, const std::string& w) {
  const std::string ws = std::to_string(g.world);
  std::vector<int64_t> c(static_cast<size_t>(g.world));
  if (given == nullptr) {
    if (t.numel % g.world != 0)
      fail(PL_ERR_INVALID_ARGUMENT, w + ": " + name + " is NULL (equal chunks) but " + tensor + " has " +
                                        count_text(t.numel) + ", which " + ws + " ranks cannot split evenly: pass " +
                                        name + ", or a numel that is a multiple of " + ws);
    for (auto& x : c) x = t.numel / g.world;
    return c;
  }
  for (int r = 0; r < g.world; ++r)
    if (given[r] < 0)
      fail(PL_ERR_INVALID_ARGUMENT, w + ": " + name + "[" + std::to_string(r) + "] is " + std::to_string(given[r]) +
                                        ": element counts must be >= 0");
  int64_t sum = 0;
  for (int r = 0; r < g.world; ++r) {
    const int64_t x = given[r];
    if (x > t.numel - sum)  // (no overflow: sum <= numel)
      fail(PL_ERR_INVALID_ARGUMENT, w + ": " + name + " add up to more than the " + count_text(t.numel) + " of " +
                                        tensor + " (at " + name + "[" + std::to_string(r) + "] = " + std::to_string(x) +
                                        "): the " + ws + " counts must add up to its numel");
    sum += x;
    c[static_cast<size_t>(r)] = x;
  }
  if (sum != t.numel)
    fail(PL_ERR_INVALID_ARGUMENT, w + ": " + name + " add up to " + std::to_string(sum) + " but " + tensor + " has " +
                                      count_text(t.numel) + ": the " + ws + " counts must add up to its numel");
  return c;
}

}  // namespace

OpDesc all_to_all_args(const PL_Tensor* input, const int64_t* input_counts, const PL_Tensor* output,
                       const int64_t* output_counts, GroupShape g, const std::string& w, const TensorCheck& check) {
  check(input, "input");
  check(output, "output");
  check_same_dtype(*input, *output, w, "input", "output");
  if (input->device.type != output->device.type || input->device.index != output->device.index)
    fail(PL_ERR_INVALID_ARGUMENT, w + ": output is on " + device_name(output->device) + " but input is on " +
                                      device_name(input->device) + ": input and output must be on one device");
  const size_t in_bytes = static_cast<size_t>(input->numel) * pl_dtype_size(input->dtype);
  const size_t out_bytes = static_cast<size_t>(output->numel) * pl_dtype_size(output->dtype);
  const auto in_at = reinterpret_cast<uintptr_t>(input->data), out_at = reinterpret_cast<uintptr_t>(output->data);
  if (in_bytes > 0 && out_bytes > 0 && in_at < out_at + out_bytes && out_at < in_at + in_bytes)
    fail(PL_ERR_INVALID_ARGUMENT, w + ": input (" + std::to_string(in_bytes) + " bytes) and output (" +
                                      std::to_string(out_bytes) +
                                      " bytes) overlap: all_to_all is not in place, "
                                      "pass an output in separate memory");
  OpDesc d;
  d.kind = OpKind::kAllToAll;
  d.dtype = input->dtype;
  d.count = input->numel;
  d.equal_chunks = input_counts == nullptr && output_counts == nullptr;
  d.counts = chunk_counts(input_counts, *input, "input", "input_counts", g, w);
  d.recv_counts = chunk_counts(output_counts, *output, "output", "output_counts", g, w);
  const size_t me = static_cast<size_t>(g.rank);
  if (d.counts[me] != d.recv_counts[me])
    fail(PL_ERR_INVALID_ARGUMENT, w + ": input_counts[" + std::to_string(g.rank) + "] is " +
                                      std::to_string(d.counts[me]) + " but output_counts[" + std::to_string(g.rank) +
                                      "] is " + std::to_string(d.recv_counts[me]) + ": this rank (" +
                                      std::to_string(g.rank) + ") keeps its own chunk, so the two must be equal");
  return d;
}

std::vector<int64_t> peer_count_row(const OpDesc& d) {
  std::vector<int64_t> row(d.counts);
  row.insert(row.end(), d.recv_counts.begin(), d.recv_counts.end());
  return row;
}

void check_peer_counts(const std::vector<int64_t>& table, int world) {
  const size_t W = static_cast<size_t>(world);
  for (size_t i = 0; i < W; ++i)
    for (size_t j = 0; j < W; ++j) {
      const int64_t sends = table[i * 2 * W + j];        // rank i's input_counts[j]
      const int64_t expects = table[j * 2 * W + W + i];  // rank j's output_counts[i]
      if (sends == expects) continue;
      const std::string si = std::to_string(i), sj = std::to_string(j);
      throw AgreedFailure(PL_ERR_INVALID_ARGUMENT,
                          "ranks " + si + " and " + sj + " disagree on their counts: rank " + si + " sends " +
                              count_text(sends) + " to rank " + sj + " (its input_counts[" + sj +
                              "] = " + std::to_string(sends) + ") but rank " + sj + " expects " + count_text(expects) +
                              " from rank " + si + " (its output_counts[" + si + "] = " + std::to_string(expects) +
                              "); rank i's input_counts[j] must equal rank j's output_counts[i]");
    }
}

OpDesc p2p_args(bool is_send, const PL_Tensor* tensor, int32_t peer, int32_t tag, GroupShape g,
                const std::string& where, const TensorCheck& check) {
  check(tensor, "tensor");
  check_rank_arg(peer, where, is_send ? "dst" : "src", g.world, g.rank, true);
  OpDesc d;
  d.kind = is_send ? OpKind::kSend : OpKind::kRecv;
  d.dtype = tensor->dtype;
  d.peer = peer;
  d.user_tag = tag;
  d.count = tensor->numel;
  return d;
}

void check_group_config(const std::string& b, const PL_Host* host, const PL_ProcessGroupConfig* c) {
  if (c == nullptr) fail(PL_ERR_INVALID_ARGUMENT, b + ": create: config is NULL");
  if (c->struct_size < PL_STRUCT_SIZE(PL_ProcessGroupConfig, options))
    fail(PL_ERR_VERSION, b + ": PL_ProcessGroupConfig.struct_size " + std::to_string(c->struct_size) +
                             " is smaller than the v1 size " +
                             std::to_string(PL_STRUCT_SIZE(PL_ProcessGroupConfig, options)));
  if (c->world_size < 1)
    fail(PL_ERR_INVALID_ARGUMENT,
         b + ": world_size " + std::to_string(c->world_size) + " is not valid: it must be >= 1");
  if (c->rank < 0 || c->rank >= c->world_size)
    fail(PL_ERR_INVALID_ARGUMENT, b + ": rank " + std::to_string(c->rank) + " is out of range for world_size " +
                                      std::to_string(c->world_size) + " (valid: 0.." +
                                      std::to_string(c->world_size - 1) + ")");
  if (c->store == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, b + ": config->store is NULL: the " + b +
                                      " process group meets its peers through the rendezvous store (pl::Store)");
  if (host->struct_size < PL_STRUCT_SIZE(PL_Host, store_api) || host->store_api == nullptr)
    fail(PL_ERR_UNSUPPORTED, b + ": the host offers no store API (PL_Host.store_api is NULL)");
}

std::map<std::string, std::string> parse_options(const std::string& b, const PL_OptionList& list,
                                                 std::vector<std::string> valid) {
  valid.push_back("probe_ms");
  std::map<std::string, std::string> out;
  if (list.count > 0 && list.items == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, b + ": options.items is NULL for " + std::to_string(list.count) + " options");
  for (size_t i = 0; i < list.count; ++i) {
    const PL_Option& opt = list.items[i];
    if (opt.key == nullptr || opt.value == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, b + ": option " + std::to_string(i) + " has a NULL key or value");
    bool known = false;
    for (const auto& k : valid) known = known || k == opt.key;
    if (!known) {
      std::string names;
      for (const auto& k : valid) names += (names.empty() ? "" : ", ") + k;
      fail(PL_ERR_INVALID_ARGUMENT, b + ": unknown option '" + opt.key + "' (valid: " + names + ")");
    }
    out[opt.key] = opt.value;
  }
  return out;
}

CoreConfig core_config(const std::string& backend, const PL_Host* host, const PL_ProcessGroupConfig& c,
                       const std::map<std::string, std::string>& options) {
  CoreConfig cc;
  cc.host = host;
  cc.backend = backend;
  cc.group = c.group_name && *c.group_name ? c.group_name : "default";
  cc.store = c.store;
  cc.rank = c.rank;
  cc.world = c.world_size;
  cc.timeout_ms = c.timeout_ms > 0 ? c.timeout_ms : PL_DEFAULT_TIMEOUT_MS;
  if (auto it = options.find("probe_ms"); it != options.end()) {
    const std::string& v = it->second;
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < 0)
      fail(PL_ERR_INVALID_ARGUMENT, backend + ": option probe_ms='" + v +
                                        "' is not valid: it must be a whole number of milliseconds >= 0 "
                                        "(0 disables the mismatch probes)");
    cc.probe_ms = x;
  }
  return cc;
}

}  // namespace plrt::pg
