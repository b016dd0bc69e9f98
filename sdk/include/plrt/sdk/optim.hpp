// pl::SGD, pl::Adam, pl::AdamW: torch.optim's update rules, each a fused kernel of the
// parameters' accelerator (one pass over param, grad and state).  A parameter whose gradient was
// not written since zero_grad (grad_is_zero), or that does not require grad, is skipped, as
// PyTorch skips a None gradient.  The kernel runs on the accelerator that owns the parameter's
// gradient (Module::to allocates it there).
//
// Range steps (a strategy's optimizer_step, ABI 1.4): step(ranges) updates elements [begin, end)
// of the flat value of some parameters, with state of its own per range, created at the first step
// that names it.  A range that covers a whole parameter uses (and checkpoints) the parameter's
// state exactly as step() does; a partial range's state is a flat tensor of end - begin elements.
#pragma once

#include <map>
#include <memory>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace pl {

// Elements [begin, end) of params()[param]'s flat value (and of its gradient and state).
struct ParamRange {
  size_t param = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

class Optimizer {
 public:
  // params: non-null and distinct (else pl::Error); lr finite and >= 0.
  explicit Optimizer(std::vector<Parameter*> params, double lr);
  virtual ~Optimizer();
  // Every trainable parameter, whole (a parameter whose gradient was not written is skipped).
  void step();
  // Only the elements in `ranges`: each names a trainable parameter of params(), 0 <= begin <=
  // end <= its numel, no two overlapping (else pl::Error naming the range, before any update);
  // an empty range does nothing.  Everything not named is left alone.  steps() counts the call.
  // Name the same ranges at every step: the state is kept per range.
  void step(const std::vector<ParamRange>& ranges);
  virtual std::string name() const = 0;  // "SGD", "Adam", "AdamW", "QAdam"
  // Its hyperparameters as name=value text (lr, and the rule's own: momentum, beta1, ...), for a
  // strategy that needs to know them (ABI 1.6 bind_optimizer).
  virtual std::vector<std::pair<std::string, std::string>> hyperparameters() const;
  void zero_grad();
  // The learning rate (virtual: an optimizer of another library keeps its own).
  virtual double lr() const { return lr_; }
  virtual void set_lr(double lr);  // negative or non-finite throws
  // The momentum a schedule may cycle (OneCycleLR): SGD's momentum, Adam's beta1 (PyTorch's
  // `momentum` / `betas[0]`).  has_momentum() false: the rule has none (momentum() throws).
  virtual bool has_momentum() const { return false; }
  virtual double momentum() const;
  virtual void set_momentum(double momentum);  // finite, in [0, 1) for beta1, >= 0 for SGD; else throws
  const std::vector<Parameter*>& params() const { return params_; }
  int64_t steps() const { return steps_; }

  // ---- checkpoints: tensors named "state.<param index>.<name>" (momentum_buffer, exp_avg,
  // exp_avg_sq), scalars by name ("lr", "step" = steps(), Adam's "state.<i>.step").  A partial
  // range's state is named "state.<i>.<begin>-<end>.<name>" (flat tensors of end - begin elements;
  // Adam's step counter "state.<i>.<begin>-<end>.step"), e.g. "state.3.0-512.exp_avg".  state_tensors
  // returns the live state (shared storage): serialise or clone it before the next step.
  // load_state checks every name, shape and dtype before changing anything, and copies the
  // tensors onto the parameters' devices. ----
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;
  virtual std::map<std::string, double> state_scalars() const;
  virtual void load_state(const std::map<std::string, Tensor>& tensors,
                          const std::map<std::string, double>& scalars) = 0;

 protected:
  // The accelerator that owns parameter i's gradient (or value); throws naming the parameter when
  // neither has one.
  const Accelerator& accelerator_of(size_t i) const;
  // Whether step() updates parameter i; throws when its gradient was written but is missing.
  bool takes_step(size_t i) const;
  // One update of parameter i's elements [begin, end) with the state kept for that range
  // (whole: begin 0, end numel, the parameter's own state).  Called by both step()s.
  virtual void update(size_t i, int64_t begin, int64_t end) = 0;
  // After the updates of one step (both step()s): a rule that updates every parameter at once (an
  // optimizer of another library) collects them in update() and runs here.
  virtual void finish_updates() {}
  bool whole(size_t i, int64_t begin, int64_t end) const { return begin == 0 && end == params_[i]->value.numel(); }
  // The flat view of elements [begin, end) of t.
  static PL_Tensor flat_view(const Tensor& t, int64_t begin, int64_t end);
  using RangeKey = std::tuple<size_t, int64_t, int64_t>;  // (param, begin, end) of a partial range
  static std::string range_prefix(const RangeKey& k);     // "state.<i>.<begin>-<end>."
  // A copy of `src` on parameter i's device, after checking its shape and dtype against the value.
  Tensor load_tensor(size_t i, const std::string& key, const Tensor& src) const;
  // The parameter index of "state.<i>.<field>" (or "state.<i>.<begin>-<end>.<field>": its range
  // in *range; a whole-parameter name sets *range to (i, -1, -1)) with `field` one of `fields`; any
  // other name, or a range outside the parameter, throws, naming it and the valid names.
  size_t state_index(const std::string& key, const std::vector<std::string>& fields, std::string* field,
                     RangeKey* range = nullptr) const;
  // A copy of `src` for partial range k (flat, end - begin elements of the parameter's dtype).
  Tensor load_range_tensor(const RangeKey& k, const std::string& key, const Tensor& src) const;
  struct Scalars {
    double lr;
    int64_t steps;
    std::map<std::string, double> rest;  // every other name, for the subclass to check
  };
  // "lr" and "step" checked (a missing one keeps the current value).
  Scalars read_scalars(const std::map<std::string, double>& scalars) const;

  std::vector<Parameter*> params_;
  double lr_;
  int64_t steps_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0 (else throws, as PyTorch)
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter*> params, SgdOptions options);
  std::string name() const override { return "SGD"; }
  bool has_momentum() const override { return true; }
  double momentum() const override { return o_.momentum; }
  void set_momentum(double momentum) override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  std::map<std::string, double> state_scalars() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, const std::map<std::string, double>& scalars) override;

 private:
  void update(size_t i, int64_t begin, int64_t end) override;
  SgdOptions o_;
  std::vector<Tensor> momentum_;               // per parameter; undefined until its first step
  std::map<RangeKey, Tensor> range_momentum_;  // per partial range
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // AdamW's default is 1e-2
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter*> params, AdamOptions options, bool decoupled_weight_decay = false);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  bool has_momentum() const override { return true; }
  double momentum() const override { return o_.beta1; }  // beta1
  void set_momentum(double beta1) override;
  std::vector<std::pair<std::string, std::string>> hyperparameters() const override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  std::map<std::string, double> state_scalars() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, const std::map<std::string, double>& scalars) override;

 protected:
  // A subclass's change to one update's arguments (QAdam: its second moment frozen after warmup);
  // ap.step is the parameter's step being taken (1-based).
  virtual void adjust(PL_AdamParams& ap, size_t i) const {
    (void)ap;
    (void)i;
  }
  const AdamOptions& adam_options() const { return o_; }
  const Tensor& exp_avg_of(size_t i) const { return exp_avg_[i]; }  // undefined before its first step
  int64_t steps_of(size_t i) const { return step_[i]; }             // parameter i's steps taken

 private:
  void update(size_t i, int64_t begin, int64_t end) override;
  AdamOptions o_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> step_;  // per parameter (1-based after its first update)
  struct RangeState {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::map<RangeKey, RangeState> range_state_;  // per partial range
};

class AdamW : public Adam {
 public:
  static AdamOptions defaults() {
    AdamOptions o;
    o.weight_decay = 1e-2;
    return o;
  }
  AdamW(std::vector<Parameter*> params, AdamOptions options = defaults()) : Adam(std::move(params), options, true) {}
};

// Bagua's QAdam (docs/bagua.md §6): Adam for the first warmup_steps steps; after them the second
// moment is frozen, and the first moment goes on as m = beta1*m + (1-beta1)*(g + wd*x), so that a
// strategy can average m itself in uint8 (bagua's qadam: ABI 1.6 bind_optimizer asks for it, and
// the Trainer then calls form_first_moment; the step takes the averaged m from the gradient).
// Alone (single device, ddp) it is that rule on the local gradient.  Checkpoints as Adam's.
// Adam's options (Bagua's QAdam has the same defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
// weight_decay 0, coupled), and the warmup.
struct QAdamOptions : AdamOptions {
  int64_t warmup_steps = 100;
};

class QAdam : public Adam {
 public:
  QAdam(std::vector<Parameter*> params, QAdamOptions options = {});
  std::string name() const override { return "QAdam"; }
  std::vector<std::pair<std::string, std::string>> hyperparameters() const override;
  int64_t warmup_steps() const { return warmup_; }
  // Whether the strategy averages the first moment (set by the Trainer from bind_optimizer).
  void set_first_moment_in_grads(bool on) { first_moment_in_grads_ = on; }
  bool first_moment_in_grads() const { return first_moment_in_grads_; }
  // Whether parameter i's next step is past the warmup (then the first moment is what travels).
  bool past_warmup(size_t i) const { return steps_of(i) >= warmup_; }
  // Writes m_i = beta1*m + (1-beta1)*(g + wd*x), times `loss_scale` (the gradient is scaled by it;
  // the unscale divides it out), into parameter i's gradient: in that order, (1-beta1)*g, then
  // + (1-beta1)*wd*scale*x, then + beta1*scale*m, each one kernel.  Past the warmup only.
  void form_first_moment(size_t i, double loss_scale);

 private:
  void adjust(PL_AdamParams& ap, size_t i) const override;
  int64_t warmup_;
  bool first_moment_in_grads_ = false;
};

}  // namespace pl
