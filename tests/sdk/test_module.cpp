// pl::Module: dotted names in PyTorch's order, registration errors, placement with to(), the
// root's training state, state_dict / load_state_dict (strict and not), and the grad_ready hook.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/nn.hpp>
#include <string>
#include <vector>

#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

namespace {

using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;

pl::Tensor vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return pl::Tensor::from_vector<float>(v, {n});
}

// root: a, enc (w, buffer running), b, dec (0 (weight))
struct Tree {
  pl::Module root, enc, dec, dec0;
  Tree() {
    root.register_parameter("a", vec({1, 2}));
    enc.register_parameter("w", pl::Tensor::zeros({2, 3}));
    enc.register_buffer("running", vec({5}));
    root.register_module("enc", enc);
    root.register_parameter("b", vec({3}));
    dec0.register_parameter("weight", vec({4, 4, 4}));
    dec.register_module("0", dec0);
    root.register_module("dec", dec);
  }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, pl::Parameter*>>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(x.first);
  return out;
}

}  // namespace

TEST(Module, NamesAreDottedInPyTorchOrder) {
  Tree t;
  // Own parameters first (registration order), then each child depth first.
  EXPECT_EQ(names(t.root.named_parameters()), (std::vector<std::string>{"a", "b", "enc.w", "dec.0.weight"}));
  EXPECT_EQ(names(t.dec.named_parameters()), (std::vector<std::string>{"0.weight"}));
  auto buffers = t.root.named_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].first, "enc.running");
  std::vector<std::string> keys;
  for (const auto& kv : t.root.state_dict()) keys.push_back(kv.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "enc.w", "enc.running", "dec.0.weight"}));
  EXPECT_EQ(t.root.parameters().size(), 4u);
  EXPECT_EQ(t.root.parameters()[2], t.enc.named_parameters()[0].second);
}

TEST(Module, BadNamesAndRegistrationsAreRejected) {
  Tree t;
  EXPECT_THAT(error_of([&] { t.root.register_parameter("a", vec({0})); }),
              HasSubstr("'a' is already registered (as a parameter"));
  EXPECT_THAT(error_of([&] { t.root.register_buffer("enc", vec({0})); }),
              HasSubstr("'enc' is already registered (as a submodule"));
  EXPECT_THAT(error_of([&] { t.enc.register_parameter("running", vec({0})); }), HasSubstr("as a buffer"));
  EXPECT_THAT(error_of([&] { t.root.register_parameter("", vec({0})); }), HasSubstr("must not be empty"));
  EXPECT_THAT(error_of([&] { t.root.register_parameter("x.y", vec({0})); }), HasSubstr("'x.y' contains '.'"));
  EXPECT_THAT(error_of([&] { t.root.register_parameter("u", pl::Tensor()); }), HasSubstr("undefined"));
  pl::Module other;
  EXPECT_THAT(error_of([&] { other.register_module("again", t.enc); }),
              HasSubstr("already registered in another module"));
  EXPECT_THAT(error_of([&] { t.dec0.register_module("up", t.root); }), HasSubstr("cycle"));
  EXPECT_THAT(error_of([&] { t.root.register_module("self", t.root); }), HasSubstr("cycle"));
  // Nothing was added by the failed calls.
  EXPECT_EQ(t.root.named_parameters().size(), 4u);
}

TEST(Module, ToPlacesTheWholeTreeAndAllocatesGradients) {
  Tree t;
  t.enc.named_parameters()[0].second->requires_grad = false;
  EXPECT_FALSE(t.dec0.accelerator().defined());
  for (auto& [name, p] : t.root.named_parameters()) EXPECT_FALSE(p->grad.defined()) << name;

  pl::Accelerator acc(runtime(), "cpu");
  t.dec0.to(acc, kCpu);  // through any module: the root's tree is placed
  EXPECT_TRUE(t.root.accelerator() == acc);
  EXPECT_TRUE(t.dec0.accelerator() == acc);
  for (auto& [name, p] : t.root.named_parameters()) {
    if (name == "enc.w") {
      EXPECT_FALSE(p->grad.defined());
      continue;
    }
    ASSERT_TRUE(p->grad.defined()) << name;
    EXPECT_EQ(p->grad.shape(), p->value.shape()) << name;
    EXPECT_EQ(p->grad.dtype(), p->value.dtype()) << name;
    EXPECT_TRUE(p->grad.accelerator() == acc) << name;
    EXPECT_TRUE(p->grad_is_zero) << name;
    for (float g : p->grad.to_vector<float>()) EXPECT_EQ(g, 0.0f);
  }
  // Registered after placement: placed at once.
  pl::Parameter& late = t.dec0.register_parameter("late", vec({1, 2, 3}));
  ASSERT_TRUE(late.grad.defined());
  EXPECT_EQ(late.grad.numel(), 3);
  pl::Module fresh;
  fresh.register_parameter("p", vec({1}));
  t.root.register_module("fresh", fresh);
  EXPECT_TRUE(fresh.named_parameters()[0].second->grad.defined());

  EXPECT_THAT(error_of([&] { t.root.to(pl::Accelerator(), kCpu); }), HasSubstr("empty handle"));
  EXPECT_THAT(error_of([&] { t.root.to(acc, {PL_DEVICE_CUDA, 0}); }), HasSubstr("no device of type 2"));
}

TEST(Module, TrainingStateIsTheRoots) {
  Tree t;
  EXPECT_TRUE(t.dec0.training());
  t.dec0.eval();
  EXPECT_FALSE(t.root.training());
  t.root.train();
  EXPECT_TRUE(t.enc.training());
  EXPECT_EQ(t.dec0.grad_scale(), 1.0);
  t.enc.set_grad_scale(0.25);
  EXPECT_EQ(t.root.grad_scale(), 0.25);
  EXPECT_EQ(t.dec0.grad_scale(), 0.25);
  EXPECT_THAT(error_of([&] { t.root.set_grad_scale(0); }), HasSubstr("0 is invalid"));
  EXPECT_THAT(error_of([&] { t.root.set_grad_scale(-1); }), HasSubstr("-1 is invalid"));
  for (auto& np : t.root.named_parameters()) np.second->grad_is_zero = false;
  t.enc.zero_grad();  // its own subtree only
  EXPECT_TRUE(t.enc.named_parameters()[0].second->grad_is_zero);
  EXPECT_FALSE(t.root.named_parameters()[0].second->grad_is_zero);
  t.root.zero_grad();
  for (auto& np : t.root.named_parameters()) EXPECT_TRUE(np.second->grad_is_zero) << np.first;
}

TEST(Module, StateDictRoundTripsAndStrictErrorsNameKeysAndShapes) {
  Tree src, dst;
  pl::Accelerator acc(runtime(), "cpu");
  dst.root.to(acc, kCpu);
  src.root.named_parameters()[2].second->value.data_ptr<float>()[4] = 42;
  src.enc.named_buffers()[0].second->data_ptr<float>()[0] = -3;
  std::map<std::string, pl::Tensor> state;
  for (auto& kv : src.root.state_dict()) state[kv.first] = kv.second;
  dst.root.load_state_dict(state);
  EXPECT_EQ(dst.enc.named_parameters()[0].second->value.to_vector<float>()[4], 42);
  EXPECT_EQ(dst.enc.named_buffers()[0].second->to_vector<float>()[0], -3);
  // Copied, not shared.
  EXPECT_NE(dst.enc.named_parameters()[0].second->value.data(), src.enc.named_parameters()[0].second->value.data());

  auto missing = state;
  missing.erase("enc.w");
  missing.erase("dec.0.weight");
  missing["extra.bias"] = vec({1});
  std::string msg = error_of([&] { dst.root.load_state_dict(missing); });
  EXPECT_THAT(msg, HasSubstr("missing keys: enc.w, dec.0.weight"));
  EXPECT_THAT(msg, HasSubstr("unexpected keys: extra.bias"));
  dst.root.load_state_dict(missing, /*strict=*/false);  // loads the keys both have

  auto wrong = state;
  wrong["enc.w"] = pl::Tensor::zeros({3, 2});
  wrong["a"] = pl::Tensor::zeros({2}, PL_F64);
  wrong["b"] = vec({99});
  msg = error_of([&] { dst.root.load_state_dict(wrong, /*strict=*/false); });
  EXPECT_THAT(msg, HasSubstr("'enc.w': the module has float32 [2, 3], the state float32 [3, 2]"));
  EXPECT_THAT(msg, HasSubstr("'a': the module has float32 [2], the state float64 [2]"));
  // Checked before copying: "b" (valid) was not written.
  EXPECT_EQ(dst.root.named_parameters()[1].second->value.to_vector<float>(), std::vector<float>{3});
}

TEST(Module, GradReadyHookSeesParametersInBackwardOrder) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::Generator gen(1);
  pl::Module net;
  pl::nn::Linear l1(4, 3, true, &gen), l2(3, 2, true, &gen);
  net.register_module("l1", l1);
  net.register_module("l2", l2);
  net.to(acc, kCpu);
  std::map<const pl::Parameter*, std::string> name_of;
  for (auto& [n, p] : net.named_parameters()) name_of[p] = n;
  std::vector<std::string> seen;
  l1.set_grad_ready_hook([&](pl::Parameter& p) { seen.push_back(name_of.at(&p)); });  // set through a child

  auto x = pl::Tensor::from_vector<float>(std::vector<float>(8, 0.5f), {2, 4});
  auto h = l2.forward(l1.forward(x));
  auto dy = pl::Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  l1.backward(l2.backward(dy), false);
  EXPECT_EQ(seen, (std::vector<std::string>{"l2.bias", "l2.weight", "l1.bias", "l1.weight"}));
  EXPECT_EQ(h.shape(), (pl::Shape{2, 2}));
}

TEST(Module, ChildDestroyedFirstLeavesTheParent) {
  pl::Module parent;
  {
    pl::Module child;
    child.register_parameter("w", vec({1}));
    parent.register_module("child", child);
    EXPECT_EQ(parent.named_parameters().size(), 1u);
  }
  EXPECT_TRUE(parent.named_parameters().empty());
  auto orphan = std::make_unique<pl::Module>();
  {
    pl::Module short_lived;
    short_lived.register_module("orphan", *orphan);
  }
  pl::Module adopter;
  adopter.register_module("orphan", *orphan);  // its parent is gone: free to join another
  EXPECT_EQ(adopter.named_parameters().size(), 0u);
}
