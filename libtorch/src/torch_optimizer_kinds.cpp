// libtorch's five optimizers as TorchOptimizer sees them (torch_optimizer_kinds.hpp).
#include "torch_optimizer_kinds.hpp"

#include <c10/util/string_utils.h>

#include <plrt/sdk/error.hpp>

namespace pl::torch::detail {

namespace optim = ::torch::optim;

Kind kind_of(const optim::Optimizer& o) {
  if (dynamic_cast<const optim::SGD*>(&o)) return Kind::kSGD;
  if (dynamic_cast<const optim::AdamW*>(&o)) return Kind::kAdamW;
  if (dynamic_cast<const optim::Adam*>(&o)) return Kind::kAdam;
  if (dynamic_cast<const optim::RMSprop*>(&o)) return Kind::kRMSprop;
  if (dynamic_cast<const optim::Adagrad*>(&o)) return Kind::kAdagrad;
  return Kind::kOther;
}

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::kSGD:
      return "SGD";
    case Kind::kAdam:
      return "Adam";
    case Kind::kAdamW:
      return "AdamW";
    case Kind::kRMSprop:
      return "RMSprop";
    case Kind::kAdagrad:
      return "Adagrad";
    case Kind::kOther:
      break;
  }
  return "torch::optim";
}

std::string state_key(const ::torch::Tensor& t) { return c10::guts::to_string(t.unsafeGetTensorImpl()); }

std::unique_ptr<optim::Optimizer> empty_like(Kind kind, const optim::OptimizerOptions& d) {
  std::vector<optim::OptimizerParamGroup> none;
  switch (kind) {
    case Kind::kSGD:
      return std::make_unique<optim::SGD>(none, static_cast<const optim::SGDOptions&>(d));
    case Kind::kAdam:
      return std::make_unique<optim::Adam>(none, static_cast<const optim::AdamOptions&>(d));
    case Kind::kAdamW:
      return std::make_unique<optim::AdamW>(none, static_cast<const optim::AdamWOptions&>(d));
    case Kind::kRMSprop:
      return std::make_unique<optim::RMSprop>(none, static_cast<const optim::RMSpropOptions&>(d));
    case Kind::kAdagrad:
      return std::make_unique<optim::Adagrad>(none, static_cast<const optim::AdagradOptions&>(d));
    case Kind::kOther:
      break;
  }
  throw pl::Error(PL_ERR_INTERNAL, "empty_like: not one of libtorch's five optimizers");
}

void init_state(Kind kind, const optim::OptimizerOptions& options, const ::torch::Tensor& param, optim::Optimizer& o) {
  if (kind != Kind::kAdagrad) return;
  auto s = std::make_unique<optim::AdagradParamState>();
  s->step(0);
  s->sum(::torch::full_like(param, static_cast<const optim::AdagradOptions&>(options).initial_accumulator_value(),
                            at::MemoryFormat::Preserve));
  o.state()[state_key(param)] = std::move(s);
}

const std::vector<std::string>& field_names(Kind kind) {
  static const std::vector<std::string> sgd{"momentum_buffer"}, adam{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
      rmsprop{"square_avg", "momentum_buffer", "grad_avg"}, adagrad{"sum"}, none;
  switch (kind) {
    case Kind::kSGD:
      return sgd;
    case Kind::kAdam:
    case Kind::kAdamW:
      return adam;
    case Kind::kRMSprop:
      return rmsprop;
    case Kind::kAdagrad:
      return adagrad;
    case Kind::kOther:
      break;
  }
  return none;
}

bool has_step(Kind kind) { return kind != Kind::kSGD && kind != Kind::kOther; }

namespace {

void add(ParamStateFields& f, const char* name, const ::torch::Tensor& t) {
  if (t.defined()) f.tensors.emplace_back(name, t);
}

template <class S>
ParamStateFields adam_fields(const optim::OptimizerParamState& state) {
  const auto& s = static_cast<const S&>(state);
  ParamStateFields f;
  add(f, "exp_avg", s.exp_avg());
  add(f, "exp_avg_sq", s.exp_avg_sq());
  add(f, "max_exp_avg_sq", s.max_exp_avg_sq());
  f.step = s.step();
  return f;
}

// Saved fields by name; need() throws naming the one missing.
struct Saved {
  const std::map<std::string, ::torch::Tensor>& t;
  const std::string& who;
  ::torch::Tensor need(const char* field) const {
    auto it = t.find(field);
    if (it == t.end()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, who + " has no '" + field + "'");
    return it->second;
  }
  ::torch::Tensor get(const char* field) const {
    auto it = t.find(field);
    return it == t.end() ? ::torch::Tensor() : it->second;
  }
};

template <class S>
std::unique_ptr<optim::OptimizerParamState> adam_state(const Saved& saved, int64_t step) {
  auto s = std::make_unique<S>();
  s->step(step);
  s->exp_avg(saved.need("exp_avg"));
  s->exp_avg_sq(saved.need("exp_avg_sq"));
  s->max_exp_avg_sq(saved.get("max_exp_avg_sq"));
  return s;
}

}  // namespace

ParamStateFields fields_of(Kind kind, const optim::OptimizerParamState& state) {
  ParamStateFields f;
  switch (kind) {
    case Kind::kSGD:
      add(f, "momentum_buffer", static_cast<const optim::SGDParamState&>(state).momentum_buffer());
      break;
    case Kind::kAdam:
      return adam_fields<optim::AdamParamState>(state);
    case Kind::kAdamW:
      return adam_fields<optim::AdamWParamState>(state);
    case Kind::kRMSprop: {
      const auto& s = static_cast<const optim::RMSpropParamState&>(state);
      add(f, "square_avg", s.square_avg());
      add(f, "momentum_buffer", s.momentum_buffer());
      add(f, "grad_avg", s.grad_avg());
      f.step = s.step();
      break;
    }
    case Kind::kAdagrad: {
      const auto& s = static_cast<const optim::AdagradParamState&>(state);
      add(f, "sum", s.sum());
      f.step = s.step();
      break;
    }
    case Kind::kOther:
      break;
  }
  return f;
}

std::unique_ptr<optim::OptimizerParamState> make_state(Kind kind, const std::map<std::string, ::torch::Tensor>& t,
                                                       int64_t step, const std::string& who) {
  const Saved saved{t, who};
  switch (kind) {
    case Kind::kSGD: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(saved.need("momentum_buffer"));
      return s;
    }
    case Kind::kAdam:
      return adam_state<optim::AdamParamState>(saved, step);
    case Kind::kAdamW:
      return adam_state<optim::AdamWParamState>(saved, step);
    case Kind::kRMSprop: {
      auto s = std::make_unique<optim::RMSpropParamState>();
      s->step(step);
      s->square_avg(saved.need("square_avg"));
      s->momentum_buffer(saved.get("momentum_buffer"));
      s->grad_avg(saved.get("grad_avg"));
      return s;
    }
    case Kind::kAdagrad: {
      auto s = std::make_unique<optim::AdagradParamState>();
      s->step(step);
      s->sum(saved.need("sum"));
      return s;
    }
    case Kind::kOther:
      break;
  }
  throw pl::Error(PL_ERR_INTERNAL, "make_state: not one of libtorch's five optimizers");
}

}  // namespace pl::torch::detail
