// What a LightningBase reaches of the trainer it is attached to, and nothing more: its log (values
// and pl::Metrics), the metric collectives (all_gather) and its detachment.  Trainer::Impl
// implements it (trainer_module_link.cpp); the trainer hands it to the module beside the Trainer*
// (LightningBase::link_), so a module never reads the trainer's state.
#pragma once

#include <plrt/sdk/lightning_base.hpp>
#include <plrt/sdk/metric.hpp>
#include <plrt/sdk/scalar.hpp>
#include <string>

#include "metrics.hpp"

namespace plrt::sdk {

class ModuleLink {
 public:
  // LightningBase::log of a value: kept aside in a dp/ddp2 replica's step, else into the metrics.
  virtual void log_value(const std::string& name, const pl::Scalar& value, const pl::LogOptions& options) = 0;
  // LightningBase::log of a pl::Metric (its options already checked): from a step, computed at
  // the epoch's end; else computed now over every rank, logged and reset.
  virtual void log_metric(const std::string& name, pl::Metric& metric, const pl::LogOptions& options) = 0;
  virtual Collectives collectives() = 0;  // the metrics' collectives (metrics.hpp decides the route)
  virtual void forget_module(const pl::LightningBase* m) = 0;  // the module is going away

 protected:
  ~ModuleLink() = default;
};

}  // namespace plrt::sdk
