// pl::Scalar: a number that may still be on its way from a device (a loss, an accuracy), read on
// the host only when somebody needs it.
//
// A training step on an asynchronous accelerator (cuda) that copied its loss to the host would
// wait there for the GPU every step, and the CPU could not queue the next step's work meanwhile.
// So nn::cross_entropy returns its loss as a Scalar, training_step returns one, and
// LightningModule::log takes one: the Trainer reads them when a logger row, the progress bar's
// frame, a callback or the epoch's end needs the value (Lightning keeps logged tensors on the
// device the same way and calls .item() only then).  A plain double converts to a ready Scalar,
// so `return 0.5;` and `log("lr", lr)` read as before.
//
// Copies share one value: the first value() reads it (through the function given to deferred),
// later ones return the same number.  value() from several threads at once is not supported: the
// Trainer reads on its own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace pl {

class Tensor;

class Scalar {
 public:
  Scalar(double value = 0.0);  // ready; implicit on purpose (a double is a Scalar)

  // Read by `read` on the first value(); `read` may wait for a device.
  static Scalar deferred(std::function<double()> read);
  // The one element of `t` (float32 or float64, any device), copied to the host on the first
  // value(); `scale` multiplies it (e.g. 1/N for a sum over N rows).
  static Scalar from_tensor(const Tensor& t, double scale = 1.0);

  double value() const;  // reads it now if it was not read yet
  explicit operator double() const { return value(); }
  bool ready() const;  // value() would return without reading anything

  // A Scalar whose value is f(this value), read when it is (this one is not read now).
  Scalar map(std::function<double(double)> f) const;

  // Deferred reads done in this process so far (tests and benchmarks: a training step that reads
  // nothing leaves it unchanged).
  static uint64_t deferred_reads();

 private:
  struct State;
  std::shared_ptr<State> s_;
};

// Arithmetic that reads neither operand: the result is read when it is (ready operands give a
// ready result).  E.g. the share-weighted loss of a whole batch, or correct / count.
Scalar operator+(const Scalar& a, const Scalar& b);
Scalar operator-(const Scalar& a, const Scalar& b);
Scalar operator*(const Scalar& a, const Scalar& b);
Scalar operator/(const Scalar& a, const Scalar& b);

}  // namespace pl
