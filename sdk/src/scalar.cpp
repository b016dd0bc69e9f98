// pl::Scalar (scalar.hpp): a value read on first use, shared by its copies.
#include <atomic>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/scalar.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>

namespace pl {

namespace {
std::atomic<uint64_t> g_reads{0};
}

struct Scalar::State {
  bool ready = true;
  double value = 0.0;
  std::function<double()> read;  // set while not ready
};

Scalar::Scalar(double value) : s_(std::make_shared<State>()) { s_->value = value; }

Scalar Scalar::deferred(std::function<double()> read) {
  if (!read) throw Error(PL_ERR_INVALID_ARGUMENT, "Scalar::deferred: the read function is empty");
  Scalar out;
  out.s_->ready = false;
  out.s_->read = std::move(read);
  return out;
}

Scalar Scalar::from_tensor(const Tensor& t, double scale) {
  if (!t.defined() || t.numel() != 1 || (t.dtype() != PL_F32 && t.dtype() != PL_F64))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Scalar::from_tensor: needs one float32 or float64 element, got " +
                    (t.defined() ? std::string(pl_dtype_name(t.dtype())) + " " + shape_text(t.shape())
                                 : std::string("an undefined tensor")));
  return deferred([t, scale] {
    const double v = t.dtype() == PL_F32 ? static_cast<double>(t.to_vector<float>()[0]) : t.to_vector<double>()[0];
    return v * scale;
  });
}

double Scalar::value() const {
  State& s = *s_;
  if (!s.ready) {
    s.value = s.read();  // a throw leaves it unread: a later value() tries again and throws again
    s.ready = true;
    s.read = nullptr;  // what it captured (a device tensor) is released now
    g_reads.fetch_add(1, std::memory_order_relaxed);
  }
  return s.value;
}

bool Scalar::ready() const { return s_->ready; }

Scalar Scalar::map(std::function<double(double)> f) const {
  if (ready()) return Scalar(f(s_->value));
  Scalar self = *this;
  return deferred([self, f = std::move(f)] { return f(self.value()); });
}

namespace {
template <class Op>
Scalar combine(const Scalar& a, const Scalar& b, Op op) {
  if (a.ready() && b.ready()) return Scalar(op(a.value(), b.value()));
  return Scalar::deferred([a, b, op] { return op(a.value(), b.value()); });
}
}  // namespace

Scalar operator+(const Scalar& a, const Scalar& b) {
  return combine(a, b, [](double x, double y) { return x + y; });
}
Scalar operator-(const Scalar& a, const Scalar& b) {
  return combine(a, b, [](double x, double y) { return x - y; });
}
Scalar operator*(const Scalar& a, const Scalar& b) {
  return combine(a, b, [](double x, double y) { return x * y; });
}
Scalar operator/(const Scalar& a, const Scalar& b) {
  return combine(a, b, [](double x, double y) { return x / y; });
}

uint64_t Scalar::deferred_reads() { return g_reads.load(std::memory_order_relaxed); }

}  // namespace pl
