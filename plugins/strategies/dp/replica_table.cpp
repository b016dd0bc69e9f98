// The replicas' tables: setup keeps the root's (replica 0) and, for ddp2, has the inner ddp
// broadcast rank 0's values into it; setup_replica checks each other replica's table entry by entry
// against the root's, since the copies and sums that follow pair entries by index.
#include "dp_strategy.hpp"

namespace plrt::dp {

using plugin::fail;

namespace {

std::string shape_of(const PL_Tensor& t) {
  std::string out = "[";
  for (int32_t d = 0; d < t.ndim && d < PL_MAX_DIMS; ++d) out += (d ? ", " : "") + std::to_string(t.shape[d]);
  out += "]";
  if (t.ndim == 0) out += " (numel " + std::to_string(t.numel) + ")";
  return out;
}

bool same_shape(const PL_Tensor& a, const PL_Tensor& b) {
  if (a.ndim != b.ndim || a.numel != b.numel) return false;
  for (int32_t d = 0; d < a.ndim && d < PL_MAX_DIMS; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

void check_struct(const std::string& what, const PL_Parameter& p) {
  if (p.struct_size < PL_STRUCT_SIZE(PL_Parameter, requires_grad))
    fail(PL_ERR_VERSION, what + ": PL_Parameter.struct_size " + std::to_string(p.struct_size) +
                             " is smaller than the v1 size " +
                             std::to_string(PL_STRUCT_SIZE(PL_Parameter, requires_grad)));
}

// Replica r's memory: host memory or the accelerator's kind; a device of the accelerator's kind
// must be the replica's own.
void check_device(const DpStrategy& s, size_t r, const std::string& what, const PL_Tensor& t) {
  if (t.device.type == PL_DEVICE_CPU) return;
  if (t.device.type != s.device_type)
    fail(PL_ERR_INVALID_ARGUMENT, what + " is on " + device_name(t.device) + ", which is neither host memory nor a " +
                                      device_type_name(s.device_type) + " device (the accelerator's kind)");
  if (t.device.index != s.device_ids[r])
    fail(PL_ERR_INVALID_ARGUMENT, what + " is on " + device_name(t.device) + ", but " + s.replica_name(r) + " drives " +
                                      device_name(s.device_of(r)) + " (device_ids[" + std::to_string(r) + "])");
}

void check_root(DpStrategy& s, PL_Parameter* params, size_t n) {
  if (n > 0 && params == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": setup: params is NULL for " + std::to_string(n) + " entries");
  s.names.clear();
  for (size_t i = 0; i < n; ++i) {
    const PL_Parameter& p = params[i];
    check_struct(s.who + ": setup: params[" + std::to_string(i) + "]", p);
    s.names.push_back(p.name && *p.name ? p.name : "params[" + std::to_string(i) + "]");
    const std::string what = s.who + ": setup: " + s.entry_name(i);
    plugin::check_tensor(&p.value, (what + " value").c_str());
    check_device(s, 0, what + " value", p.value);
    if (!p.requires_grad) continue;
    plugin::check_tensor(&p.grad, (what + " grad").c_str());
    check_device(s, 0, what + " grad", p.grad);
    if (p.grad.dtype != p.value.dtype || p.grad.numel != p.value.numel)
      fail(PL_ERR_INVALID_ARGUMENT, what + ": its grad is " + plugin::describe(p.grad) + " but its value is " +
                                        plugin::describe(p.value) + " (they must match)");
  }
}

// Replica r's tensor `t` (named by `what`) against the root's: the same kind of device, the
// replica's own device, and memory of its own (`needs`: what each replica must own), since shared
// memory would make the copy a no-op and the sum count a gradient twice.
void check_placement(const DpStrategy& s, size_t r, const std::string& what, const PL_Tensor& t, const PL_Tensor& root,
                     const char* needs) {
  if (t.device.type != root.device.type)
    fail(PL_ERR_INVALID_ARGUMENT, what + " is on " + device_name(t.device) + " but the root's is on " +
                                      device_name(root.device) + " (the device type must match)");
  check_device(s, r, what, t);
  if (t.numel > 0 && t.data == root.data)
    fail(PL_ERR_INVALID_ARGUMENT, what + " is the root's own memory; each replica needs its own " + needs);
}

// One entry of replica r against the root's entry i.
void check_entry(const DpStrategy& s, size_t r, size_t i, const PL_Parameter& p) {
  const PL_Parameter& root = s.root[i];
  const std::string at = s.who + ": setup_replica(" + std::to_string(r) + "): entry " + std::to_string(i);
  check_struct(at, p);
  const std::string name = p.name ? p.name : "";
  const std::string root_name = root.name ? root.name : "";
  if (name != root_name)
    fail(PL_ERR_INVALID_ARGUMENT, at + " is named '" + name + "' but the root's entry " + std::to_string(i) + " is '" +
                                      root_name + "' (replicas list the same entries in the same order)");
  const std::string what = s.who + ": setup_replica(" + std::to_string(r) + "): " + s.entry_name(i);
  plugin::check_tensor(&p.value, (what + " value").c_str());
  if (p.value.dtype != root.value.dtype)
    fail(PL_ERR_INVALID_ARGUMENT,
         what + " has dtype " + pl_dtype_name(p.value.dtype) + " but the root's is " + pl_dtype_name(root.value.dtype));
  if (!same_shape(p.value, root.value))
    fail(PL_ERR_INVALID_ARGUMENT,
         what + " has shape " + shape_of(p.value) + " but the root's is " + shape_of(root.value));
  if ((p.requires_grad != 0) != (root.requires_grad != 0))
    fail(PL_ERR_INVALID_ARGUMENT, what + " has requires_grad " + std::to_string(p.requires_grad != 0) +
                                      " but the root's is " + std::to_string(root.requires_grad != 0));
  check_placement(s, r, what + " value", p.value, root.value, "copy");
  if (!p.requires_grad) return;
  plugin::check_tensor(&p.grad, (what + " grad").c_str());
  if (p.grad.dtype != p.value.dtype || p.grad.numel != p.value.numel)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": its grad is " + plugin::describe(p.grad) + " but its value is " +
                                      plugin::describe(p.value) + " (they must match)");
  check_placement(s, r, what + " grad", p.grad, root.grad, "gradients");
}

void reset_table(DpStrategy& s) {
  s.root = nullptr;
  s.num_params = 0;
  s.names.clear();
  s.replicas.clear();
  s.replica_tables.clear();
  s.set_up = false;
}

}  // namespace

void require_replicas_locked(const DpStrategy& s, const char* fn) {
  if (!s.set_up) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": " + fn + " was called before setup");
  for (size_t r = 1; r < s.n(); ++r)
    if (s.replicas[r] == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, s.who + ": " + fn + ": " + s.replica_name(r) +
                                        " was not registered: call setup_replica(" + std::to_string(r) +
                                        ", params) for every replica 1.." + std::to_string(s.n() - 1) + " after setup");
}

void setup(DpStrategy& s, PL_Parameter* params, size_t num_params) {
  std::lock_guard<std::mutex> lock(s.m);
  require_idle(s, "setup");
  if (s.set_up)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": setup was called twice; call teardown before setting up again");
  check_root(s, params, num_params);
  s.root = params;
  s.num_params = num_params;
  s.replicas.assign(s.n(), nullptr);
  s.replicas[0] = params;
  if (s.inner != nullptr) {
    try {
      ddp::setup(*s.inner, params, num_params);  // rank 0's values, across processes
    } catch (...) {
      reset_table(s);
      throw;
    }
  }
  s.dirty = true;
  s.set_up = true;
}

void setup_replica(DpStrategy& s, int32_t replica, PL_Parameter* params, size_t num_params) {
  std::lock_guard<std::mutex> lock(s.m);
  const std::string at = s.who + ": setup_replica(" + std::to_string(replica) + ")";
  require_idle(s, "setup_replica");
  if (!s.set_up) fail(PL_ERR_INVALID_ARGUMENT, at + " was called before setup");
  if (s.n() == 1)
    fail(PL_ERR_INVALID_ARGUMENT, at + ": this process drives 1 replica (device_ids has one device), so there is no "
                                       "replica to register");
  if (replica < 1 || static_cast<size_t>(replica) >= s.n())
    fail(PL_ERR_INVALID_ARGUMENT, at + ": replica " + std::to_string(replica) + " is out of range: valid 1.." +
                                      std::to_string(s.n() - 1) + " (replica 0 is setup's parameters)");
  const size_t r = static_cast<size_t>(replica);
  if (s.replicas[r] != nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, at + ": " + s.replica_name(r) +
                                      " is already registered; call teardown and setup "
                                      "again to change it");
  if (num_params != s.num_params)
    fail(PL_ERR_INVALID_ARGUMENT, at + ": the replica has " + std::to_string(num_params) +
                                      " entries but setup registered " + std::to_string(s.num_params));
  if (num_params > 0 && params == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, at + ": params is NULL for " + std::to_string(num_params) + " entries");
  for (size_t i = 0; i < num_params; ++i) check_entry(s, r, i, params[i]);
  if (s.replica_tables.size() < s.n()) s.replica_tables.resize(s.n());
  s.replica_tables[r].assign(params, params + num_params);
  for (size_t i = 0; i < num_params; ++i) s.replica_tables[r][i].name = s.root[i].name;
  s.replicas[r] = s.replica_tables[r].data();
  s.dirty = true;  // a new replica has none of the root's values yet
}

void teardown(DpStrategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  require_idle(s, "teardown");
  s.pool.stop();
  free_scratch(s);
  reset_table(s);
  s.dirty = true;
  if (s.inner != nullptr) ddp::teardown(*s.inner);
}

}  // namespace plrt::dp
