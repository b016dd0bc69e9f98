// pl::nn on the cpu accelerator: a finite-difference gradient check (f64) of
// Linear -> ReLU -> Linear -> cross_entropy for every weight, bias and the input, with grad_scale
// and accumulation; Linear's initialisation; buffer reuse; cross_entropy's results and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <plrt/sdk/nn.hpp>
#include <string>
#include <vector>

#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

namespace {

using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;

struct Net : pl::Module {
  pl::nn::Linear l1, l2;
  pl::nn::ReLU relu;
  explicit Net(pl::Generator& g) : l1(5, 7, true, &g, PL_F64), l2(7, 3, true, &g, PL_F64) {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  double loss(const pl::Tensor& x, const pl::Tensor& y) {
    return pl::nn::cross_entropy(l2.forward(relu.forward(l1.forward(x))), y, false).loss.value();
  }
  // One forward and backward; returns d(mean loss)/dx.
  std::vector<double> backward(const pl::Tensor& x, const pl::Tensor& y) {
    auto ce = pl::nn::cross_entropy(l2.forward(relu.forward(l1.forward(x))), y, true);
    return l1.backward(relu.backward(l2.backward(ce.grad)), true).to_vector<double>();
  }
};

struct Batch {
  pl::Tensor x, y;
};

Batch make_batch(pl::Generator& g) {
  std::vector<double> x(4 * 5);
  for (double& v : x) v = g.uniform(-2, 2);
  return {pl::Tensor::from_vector<double>(x, {4, 5}), pl::Tensor::from_vector<int64_t>({0, 2, 1, 2}, {4})};
}

// Central difference of the loss with respect to element k of `t` (a host tensor).
double numeric(Net& net, const Batch& b, pl::Tensor& t, int64_t k) {
  const double h = 1e-6;
  double* p = t.data_ptr<double>();
  const double v = p[k];
  p[k] = v + h;
  const double up = net.loss(b.x, b.y);
  p[k] = v - h;
  const double down = net.loss(b.x, b.y);
  p[k] = v;
  return (up - down) / (2 * h);
}

void expect_grad(double analytic, double num, const std::string& what) {
  EXPECT_NEAR(analytic, num, 1e-7 + 1e-6 * std::fabs(num)) << what;
}

}  // namespace

TEST(Nn, GradientsMatchFiniteDifferencesWithScaleAndAccumulation) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::Generator g(5);
  Net net(g);
  net.to(acc, kCpu);
  Batch b = make_batch(g);
  const double scale = 0.5;
  net.set_grad_scale(scale);

  const std::vector<double> dx = net.backward(b.x, b.y);
  for (int64_t k = 0; k < b.x.numel(); ++k) expect_grad(dx[k], numeric(net, b, b.x, k), "x[" + std::to_string(k) + "]");
  std::vector<std::vector<double>> first;
  for (auto& [name, p] : net.named_parameters()) {
    EXPECT_FALSE(p->grad_is_zero) << name;
    const std::vector<double> grad = p->grad.to_vector<double>();
    for (int64_t k = 0; k < p->value.numel(); ++k)
      expect_grad(grad[k] / scale, numeric(net, b, p->value, k), name + "[" + std::to_string(k) + "]");
    first.push_back(grad);
  }

  // Without zero_grad the next backward adds; after it, the next one overwrites.
  net.backward(b.x, b.y);
  size_t i = 0;
  for (auto& [name, p] : net.named_parameters()) {
    const std::vector<double> grad = p->grad.to_vector<double>();
    for (size_t k = 0; k < grad.size(); ++k) EXPECT_NEAR(grad[k], 2 * first[i][k], 1e-14) << name << k;
    ++i;
  }
  net.zero_grad();
  net.backward(b.x, b.y);
  i = 0;
  for (auto& [name, p] : net.named_parameters()) EXPECT_EQ(p->grad.to_vector<double>(), first[i++]) << name;
}

TEST(Nn, FrozenParametersKeepTheirGradientsAndSkipGradReady) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::Generator g(2);
  Net net(g);
  net.l1.weight().requires_grad = false;
  net.to(acc, kCpu);
  int ready = 0;
  net.set_grad_ready_hook([&](pl::Parameter& p) {
    EXPECT_NE(&p, &net.l1.weight());
    ++ready;
  });
  Batch b = make_batch(g);
  net.backward(b.x, b.y);
  EXPECT_EQ(ready, 3);
  EXPECT_TRUE(net.l1.weight().grad_is_zero);
}

TEST(Nn, LinearInitialisesAsTorchFromTheGenerator) {
  pl::Generator g(42), replay(42);
  pl::nn::Linear lin(16, 3, true, &g);
  const double bound = 1.0 / std::sqrt(16.0);
  // weight [out, in] first, then bias, each uniform(-bound, bound) in order
  for (float w : lin.weight().value.to_vector<float>()) EXPECT_EQ(w, static_cast<float>(replay.uniform(-bound, bound)));
  for (float v : lin.bias()->value.to_vector<float>()) EXPECT_EQ(v, static_cast<float>(replay.uniform(-bound, bound)));
  EXPECT_EQ(lin.weight().value.shape(), (pl::Shape{3, 16}));
  EXPECT_EQ(lin.bias()->value.shape(), (pl::Shape{3}));
  pl::nn::Linear no_bias(2, 2, false, &g);
  EXPECT_EQ(no_bias.bias(), nullptr);
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_THAT(error_of([&] { pl::nn::Linear(0, 3); }), HasSubstr("Linear(0, 3)"));
  EXPECT_THAT(error_of([&] { pl::nn::Linear(2, 3, true, &g, PL_BF16); }), HasSubstr("bfloat16"));
}

TEST(Nn, LayersNeedPlacementAndCheckShapes) {
  pl::Generator g(3);
  pl::nn::Linear lin(4, 2, true, &g);
  auto x = pl::Tensor::zeros({3, 4});
  EXPECT_THAT(error_of([&] { lin.forward(x); }), HasSubstr("module.to(accelerator, device)"));
  pl::Accelerator acc(runtime(), "cpu");
  lin.to(acc, kCpu);
  EXPECT_THAT(error_of([&] { lin.backward(pl::Tensor::zeros({3, 2})); }), HasSubstr("call forward first"));
  EXPECT_THAT(error_of([&] { lin.forward(pl::Tensor::zeros({3, 5})); }), HasSubstr("[3, 5]; expected [N, 4]"));
  EXPECT_THAT(error_of([&] { lin.forward(pl::Tensor::zeros({3, 4}, PL_F64)); }), HasSubstr("float64"));
  lin.forward(x);
  EXPECT_THAT(error_of([&] { lin.backward(pl::Tensor::zeros({2, 2})); }), HasSubstr("[2, 2]"));
  pl::nn::ReLU relu;
  EXPECT_THAT(error_of([&] { relu.forward(x); }), HasSubstr("plain host tensor"));
  EXPECT_THAT(error_of([&] { relu.backward(x); }), HasSubstr("call forward first"));
}

TEST(Nn, ActivationBuffersAreReusedWhileTheShapeRepeats) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::Generator g(4);
  pl::nn::Linear lin(4, 4, true, &g);
  lin.to(acc, kCpu);
  pl::nn::ReLU relu;
  auto x = pl::Tensor::zeros({3, 4});
  void* y1 = lin.forward(x).data();
  void* r1 = relu.forward(lin.forward(x)).data();
  void* dx1 = lin.backward(relu.backward(pl::Tensor::zeros(acc, kCpu, {3, 4}))).data();
  EXPECT_EQ(lin.forward(x).data(), y1);
  EXPECT_EQ(relu.forward(lin.forward(x)).data(), r1);
  EXPECT_EQ(lin.backward(relu.backward(pl::Tensor::zeros(acc, kCpu, {3, 4}))).data(), dx1);
  EXPECT_EQ(lin.forward(pl::Tensor::zeros({5, 4})).shape(), (pl::Shape{5, 4}));  // a new batch size
  // Its own output as input (in == out): a fresh buffer rather than an aliased gemm.
  pl::Tensor y = lin.forward(x);
  pl::Tensor y2 = lin.forward(y);
  EXPECT_NE(y2.data(), y.data());
}

TEST(Nn, CrossEntropyMeanLossGradAndAccuracy) {
  pl::Accelerator acc(runtime(), "cpu");
  const std::vector<float> z = {2, 1, 0, 0, 0, 5, 1, 1, 1};
  auto logits = pl::Tensor::empty(acc, kCpu, {3, 3}, PL_F32);
  logits.copy_from(pl::Tensor::from_vector<float>(z, {3, 3}));
  auto labels = pl::Tensor::from_vector<int64_t>({0, 1, 2}, {3});
  auto ce = pl::nn::cross_entropy(logits, labels);
  double want = 0;
  std::vector<double> grad;
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += std::exp(z[i * 3 + j]);
    want += std::log(s) - z[i * 3 + (int)labels.to_vector<int64_t>()[i]];
    for (int j = 0; j < 3; ++j) grad.push_back((std::exp(z[i * 3 + j]) / s - (j == i)) / 3);
  }
  EXPECT_NEAR(ce.loss.value(), want / 3, 1e-6);
  EXPECT_EQ(ce.count, 3);
  EXPECT_EQ(ce.correct.value(), 1.0);  // row 0 is right; row 1 predicts 2; row 2's three-way tie goes to class 0
  const auto g = ce.grad.to_vector<float>();
  for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], grad[k], 1e-6) << k;
  EXPECT_FALSE(pl::nn::cross_entropy(logits, labels, false).grad.defined());

  EXPECT_THAT(error_of([&] {
                pl::nn::cross_entropy(logits, pl::Tensor::from_vector<int64_t>({0, 3, 1}, {3}));
              }),
              HasSubstr("label 3 at row 1"));
  EXPECT_THAT(error_of([&] {
                pl::nn::cross_entropy(logits, pl::Tensor::from_vector<int64_t>({0, 1}, {2}));
              }),
              HasSubstr("labels must be int64 [3]"));
  EXPECT_THAT(error_of([&] {
                pl::nn::cross_entropy(logits, pl::Tensor::from_vector<int32_t>({0, 1, 2}, {3}));
              }),
              HasSubstr("int32"));
  EXPECT_THAT(error_of([&] {
                pl::nn::cross_entropy(pl::Tensor::zeros({3, 3}), labels);
              }),
              HasSubstr("plain host tensor"));
  EXPECT_THAT(error_of([&] {
                pl::nn::cross_entropy(pl::Tensor::empty(acc, kCpu, {0, 3}), pl::Tensor::zeros({0}, PL_I64));
              }),
              HasSubstr("empty batch"));
}
