// The gloo process group's argument errors: each names the bad value and what is valid, is
// PL_ERR_INVALID_ARGUMENT, and leaves the group usable.  Bad group configurations fail in create.
#include <gmock/gmock.h>

#include "gloo_threads.hpp"

using namespace gloo_threads;
using ::testing::HasSubstr;

namespace {

template <class F>
void expect_invalid(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << part;
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

TEST(GlooArguments, EachBadArgumentIsNamedAndTheGroupStaysUsable) {
  Job job(2);
  job.run([&](Rank& r) {
    const std::string self = std::to_string(r.rank);
    Buf b(PL_F32, 4), three(PL_F32, 3), ints(PL_I32, 4);
    PL_Tensor t = b.tensor();
    PL_Tensor cuda = b.tensor();
    cuda.device = {PL_DEVICE_CUDA, 0};
    expect_invalid([&] { r.pg->allreduce(cuda, PL_REDUCE_SUM); },
                   "gloo allreduce: tensor is on cuda:0, but this gloo group takes CPU tensors only");
    expect_invalid([&] { r.pg->allreduce(t, 9); },
                   "gloo allreduce: unknown reduce op 9 (valid: 1 sum, 2 avg, 3 min, 4 max, 5 product)");
    PL_Tensor bad_dtype = b.tensor();
    bad_dtype.dtype = 42;
    expect_invalid([&] { r.pg->allreduce(bad_dtype, PL_REDUCE_SUM); },
                   "gloo allreduce: tensor: unknown dtype 42 (valid:");
    PL_Tensor negative = b.tensor();
    negative.numel = -1;
    expect_invalid([&] { r.pg->broadcast(negative, 0); }, "gloo broadcast: tensor: negative element count -1");
    PL_Tensor null_data = b.tensor();
    null_data.data = nullptr;
    expect_invalid([&] { r.pg->allreduce(null_data, PL_REDUCE_SUM); }, "tensor: data is NULL for 4 elements");

    std::vector<PL_Tensor> one{b.tensor()};
    expect_invalid([&] { r.pg->allgather(t, one); },
                   "gloo allgather: num_outputs is 1, but the group has 2 ranks: pass one output per rank");
    expect_invalid([&] { r.pg->reduce_scatter(one, t); },
                   "gloo reduce_scatter: num_inputs is 1, but the group has 2 ranks: pass one input per rank");
    std::vector<PL_Tensor> int_outs{ints.tensor(), ints.tensor()};
    expect_invalid([&] { r.pg->allgather(t, int_outs); }, "gloo allgather: outputs[0] is int32 but input is float32");
    std::vector<PL_Tensor> short_outs{three.tensor(), three.tensor()};
    expect_invalid([&] { r.pg->allgather(t, short_outs); },
                   "gloo allgather: outputs[" + self + "] has 3 elements but the input has 4");
    std::vector<PL_Tensor> cuda_outs{b.tensor(), cuda};
    expect_invalid([&] { r.pg->allgather(t, cuda_outs); }, "gloo allgather: outputs[1] is on cuda:0");
    std::vector<PL_Tensor> ins{b.tensor(), b.tensor()};
    PL_Tensor out3 = three.tensor();
    expect_invalid([&] { r.pg->reduce_scatter(ins, out3); },
                   "gloo reduce_scatter: output has 3 elements but inputs[" + self + "] has 4");
    expect_invalid([&] { r.pg->reduce_scatter(ins, t, 0); }, "gloo reduce_scatter: unknown reduce op 0");

    expect_invalid([&] { r.pg->broadcast(t, 5); },
                   "gloo broadcast: root 5 is out of range: valid ranks are 0..1 (world size 2)");
    expect_invalid([&] { r.pg->broadcast(t, -1); }, "gloo broadcast: root -1 is out of range");
    expect_invalid([&] { r.pg->send(t, r.rank, 0); }, "gloo send: dst " + self + " is this rank");
    expect_invalid([&] { r.pg->recv(t, 2, 0); }, "gloo recv: src 2 is out of range");
    expect_invalid([&] { r.pg->send_async(t, -3, 0); }, "gloo send: dst -3 is out of range");

    // None of this consumed a sequence number or broke the group.
    for (size_t i = 0; i < 4; ++i) b.set(i, r.rank + 1);
    r.pg->allreduce(t, PL_REDUCE_SUM);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.at(i), 3.0);
    r.pg->barrier();
  });
}

TEST(GlooArguments, BadGroupConfigurationsFailInCreate) {
  Job job(1);
  pl::Runtime rt(runtime_options());
  pl::Store store(rt, job.client_options());
  auto create = [&](int rank, int world, std::vector<std::pair<std::string, std::string>> options) {
    pl::ProcessGroupOptions po;
    po.rank = rank;
    po.world_size = world;
    po.timeout = 5s;
    po.options = std::move(options);
    pl::ProcessGroup pg(rt, "gloo", store, po);
  };
  expect_invalid([&] { create(2, 2, {}); }, "gloo: rank 2 is out of range for world_size 2 (valid: 0..1)");
  expect_invalid([&] { create(-1, 2, {}); }, "gloo: rank -1 is out of range for world_size 2");
  expect_invalid([&] { create(0, 0, {}); }, "gloo: world_size 0 is not valid: it must be >= 1");
  expect_invalid(
      [&] {
        create(0, 1, {{"ifname", "eth0"}});
      },
      "gloo: unknown option 'ifname' (valid: iface, hostname, allreduce, probe_ms)");
  expect_invalid(
      [&] {
        create(0, 1, {{"probe_ms", "-5"}});
      },
      "gloo: option probe_ms='-5' is not valid: it must be a whole number of milliseconds >= 0");
  expect_invalid(
      [&] {
        create(0, 2, {{"allreduce", "tree"}});
      },
      "gloo: option allreduce='tree' is not valid: use ring, bcube or auto");
  expect_invalid(
      [&] {
        create(0, 2, {{"iface", "nosuch0"}});
      },
      "gloo: interface 'nosuch0' (option iface) does not exist or has no IP address (interfaces with one: lo");

  // Through the C table: a NULL store, and the descriptor's ABI minor (1.1: blocking calls).
  const pl::PluginRef plugin = rt.find(PL_PLUGIN_PROCESS_GROUP, "gloo");
  EXPECT_EQ(plugin.plugin->abi_minor, PL_ABI_MINOR);
  EXPECT_GE(plugin.plugin->abi_minor, 1);  // 1.1 introduced blocking calls
  const auto* api = plugin.api<PL_ProcessGroupApi>();
  EXPECT_GE(plugin.plugin->abi_minor, 4);  // 1.4: all_to_all
  ASSERT_TRUE(PL_HAS_FIELD(PL_ProcessGroupApi, api, all_to_all));
  EXPECT_NE(api->all_to_all, nullptr);
  PL_ProcessGroupConfig c{};
  c.struct_size = sizeof c;
  c.rank = 0;
  c.world_size = 1;
  c.store = nullptr;
  c.group_name = "nostore";
  c.device = {PL_DEVICE_CPU, 0};
  c.options = {sizeof(PL_OptionList), nullptr, 0};
  PL_ProcessGroup* pg = nullptr;
  expect_invalid([&] { pl::check(rt.host(), api->create(rt.host(), &c, &pg)); },
                 "gloo: config->store is NULL: the gloo process group meets its peers through the rendezvous store");
  EXPECT_EQ(pg, nullptr);
}

}  // namespace
