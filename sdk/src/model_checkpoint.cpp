// pl::ModelCheckpoint (model_checkpoint.hpp): Lightning's top-k checkpointing.  Rank 0 decides
// (which folder, which ones to drop, the new top-k) and sends the decision to every rank in one
// allgather, so that every rank makes the collective save alike and holds the same state.
#include <cmath>
#include <filesystem>
#include <limits>
#include <plrt/sdk/model_checkpoint.hpp>
#include <plrt/sdk/trainer.hpp>
#include <regex>

#include "hparams_json.hpp"
#include "sdk_internal.hpp"

namespace pl {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Python's str() of the value: an integer (epoch, step) in full ("100000", not "1e+05").
std::string python_str(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return plrt::sdk::shortest(v);
}

// One "{name}" or "{name:spec}" of the template.
struct Field {
  size_t begin, end;  // [begin, end) in the template, braces included
  std::string name, spec;
};

const std::regex& spec_re() {  // Python's [0][width][.precision][type] for numbers
  static const std::regex re("^(0?)([0-9]*)(\\.[0-9]+)?([dfeEgG%]?)$");
  return re;
}

std::vector<Field> parse_template(const std::string& t) {
  std::vector<Field> out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '}')
      throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint filename '" + t + "' has a '}' without its '{' at " +
                                               std::to_string(i) + "; fields are {name} or {name:spec}");
    if (t[i] != '{') continue;
    size_t close = t.find('}', i);
    if (close == std::string::npos)
      throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint filename '" + t +
                                               "' has a '{' that is not closed; fields are {name} or {name:spec}");
    std::string body = t.substr(i + 1, close - i - 1);
    Field f{i, close + 1, body, ""};
    if (auto colon = body.find(':'); colon != std::string::npos)
      f.name = body.substr(0, colon), f.spec = body.substr(colon + 1);
    if (f.name.empty() || f.name.find('{') != std::string::npos)
      throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint filename '" + t + "' has an empty or bad field '{" + body +
                                               "}'; e.g. {epoch}, {val_loss:.3f}");
    if (!f.spec.empty() && !std::regex_match(f.spec, spec_re()))
      throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint filename '" + t + "': format spec '" + f.spec + "' of {" +
                                               f.name +
                                               "} is not supported; valid: [0][width][.precision][d|f|e|E|g|G|%], "
                                               "e.g. .3f, 03d, .2e");
    out.push_back(f);
    i = close;
  }
  return out;
}

std::string format_value(double v, const std::string& spec) {
  if (spec.empty()) return python_str(v);
  std::smatch m;
  std::regex_match(spec, m, spec_re());
  std::string type = m[4].str();
  if (type.empty()) type = m[3].matched ? "g" : "";
  if (type.empty()) {  // width only: as Python's default (repr), padded
    std::string s = python_str(v);
    size_t width = m[2].str().empty() ? 0 : std::stoul(m[2].str());
    if (s.size() < width) s.insert(0, width - s.size(), m[1].str() == "0" ? '0' : ' ');
    return s;
  }
  const bool percent = type == "%";
  if (percent) v *= 100, type = "f";
  std::string fmt = "%" + m[1].str() + m[2].str();
  char buf[128];
  if (type == "d") {
    fmt += "lld";
    std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<long long>(std::llround(v)));
  } else {
    fmt += (m[3].matched ? m[3].str() : std::string(".6")) + type;
    std::snprintf(buf, sizeof buf, fmt.c_str(), v);
  }
  return std::string(buf) + (percent ? "%" : "");
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : o_(std::move(options)), best_score_(std::nan("")), kth_score_(std::nan("")) {
  if (o_.mode != "min" && o_.mode != "max")
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint mode '" + o_.mode + "' is not valid; valid: min, max");
  if (o_.save_top_k < -1)
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint save_top_k " + std::to_string(o_.save_top_k) +
                                             " is not valid; valid: -1 (all), 0 (none) or k >= 1");
  if (o_.monitor.empty() && o_.save_top_k > 1)
    throw Error(
        PL_ERR_INVALID_ARGUMENT,
        "ModelCheckpoint save_top_k " + std::to_string(o_.save_top_k) +
            " without a monitor has no value to rank the checkpoints by; set monitor, or save_top_k -1, 0 or 1");
  if (o_.every_n_train_steps < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint every_n_train_steps " +
                                             std::to_string(o_.every_n_train_steps) +
                                             " is not valid; valid: >= 0 (0: off)");
  if (o_.every_n_epochs && *o_.every_n_epochs < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint every_n_epochs " + std::to_string(*o_.every_n_epochs) +
                                             " is not valid; valid: >= 0 (0: off)");
  if (o_.every_n_train_steps > 0 && o_.every_n_epochs.value_or(0) > 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint every_n_train_steps (" +
                                             std::to_string(o_.every_n_train_steps) + ") and every_n_epochs (" +
                                             std::to_string(*o_.every_n_epochs) + ") exclude each other; set one");
  every_n_epochs_ = o_.every_n_epochs.value_or(o_.every_n_train_steps > 0 ? 0 : 1);
  if (o_.filename.empty()) o_.filename = "{epoch}-{step}";
  parse_template(o_.filename);  // its errors now, before any training
}

std::string ModelCheckpoint::format_checkpoint_name(const std::map<std::string, double>& values) const {
  const auto fields = parse_template(o_.filename);
  std::string out;
  size_t at = 0;
  for (const auto& f : fields) {
    out += o_.filename.substr(at, f.begin - at);
    auto it = values.find(f.name);
    const double v = it == values.end() ? 0.0 : it->second;  // Lightning: 0 when not logged
    if (o_.auto_insert_metric_name) out += f.name + "=";
    out += format_value(v, f.spec);
    at = f.end;
  }
  return out + o_.filename.substr(at);
}

std::string ModelCheckpoint::state_key() const {
  return "ModelCheckpoint{monitor=" + o_.monitor + ", mode=" + o_.mode +
         ", every_n_train_steps=" + std::to_string(o_.every_n_train_steps) +
         ", every_n_epochs=" + std::to_string(every_n_epochs_) + "}";
}

HParams ModelCheckpoint::state_dict() const {
  HParams s{{"dirpath", dir_},
            {"best_model_path", best_path_},
            {"best_model_score", best_score_},
            {"kth_best_model_path", kth_path_},
            {"kth_value", kth_score_},
            {"last_model_path", last_path_},
            {"last_global_step_saved", last_step_saved_},
            {"best_k_models", static_cast<int64_t>(best_k_.size())}};
  int64_t i = 0;
  for (const auto& [path, score] : best_k_) {
    s.emplace("best_k_models." + std::to_string(i) + ".path", path);
    s.emplace("best_k_models." + std::to_string(i) + ".score", score);
    ++i;
  }
  return s;
}

void ModelCheckpoint::load_state_dict(const HParams& s) {
  auto str = [&](const std::string& k) { return string_of(s, k); };
  auto num = [&](const std::string& k, double fallback) { return number_of(s, k, fallback); };
  const std::string dir = str("dirpath");
  if (!dir_.empty() && !dir.empty() && dir != dir_) return;  // another folder: tracking starts afresh
  best_path_ = str("best_model_path");
  kth_path_ = str("kth_best_model_path");
  last_path_ = str("last_model_path");
  best_score_ = num("best_model_score", best_score_);
  kth_score_ = num("kth_value", kth_score_);
  last_step_saved_ = static_cast<int64_t>(num("last_global_step_saved", -1));
  best_k_.clear();
  const auto n = static_cast<int64_t>(num("best_k_models", 0));
  const double worst = o_.mode == "min" ? kInf : -kInf;  // a NaN score ranks last, as when it was entered
  for (int64_t i = 0; i < n; ++i) {
    const double score = num("best_k_models." + std::to_string(i) + ".score", worst);
    best_k_[str("best_k_models." + std::to_string(i) + ".path")] = std::isnan(score) ? worst : score;
  }
  if (std::isnan(kth_score_) && !best_k_.empty()) kth_score_ = worst;
}

// Every rank learns rank 0's folder (the log folder is rank 0's), so that every rank makes the
// same choice when a checkpoint's state comes from another folder (load_state_dict).
void ModelCheckpoint::setup(Trainer& trainer, LightningBase&, const std::string& stage) {
  if (stage != "fit") return;
  if (!o_.dirpath.empty())
    dir_ = o_.dirpath;
  else
    dir_ = trainer.log_dir().empty() ? std::string() : trainer.log_dir() + "/checkpoints";
  dir_ = trainer.broadcast(dir_);  // collective: setup runs on every rank
  warned_ = false;
}

bool ModelCheckpoint::better(double a, double b) const { return o_.mode == "min" ? a < b : a > b; }

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, LightningBase&, const Scalar&, const Batch&, int64_t) {
  if (o_.every_n_train_steps <= 0 || trainer.global_step() == 0) return;
  if (trainer.global_step() % o_.every_n_train_steps != 0 || trainer.global_step() == last_step_saved_) return;
  check(trainer, false);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, LightningBase&) {
  if (every_n_epochs_ <= 0 || (trainer.current_epoch() + 1) % every_n_epochs_ != 0) return;
  if (!trainer.acts_at_train_epoch_end(o_.save_on_train_epoch_end, !trainer.fit_has_validation())) return;
  if (trainer.global_step() == last_step_saved_) return;
  check(trainer, true);
}

// fit validating inside epochs (val_check_interval): each of its validations' ends, as Lightning's.
void ModelCheckpoint::on_validation_end(Trainer& trainer, LightningBase&) {
  if (!trainer.acts_at_validation_end(o_.save_on_train_epoch_end)) return;
  if (every_n_epochs_ <= 0 || (trainer.current_epoch() + 1) % every_n_epochs_ != 0) return;
  if (trainer.global_step() == last_step_saved_) return;
  check(trainer, false);
}

// Rank 0's decision as JSON: {"error"} | {"save": path|"", "remove": [...], "warn"?,
// "last": path|"", "state": {...}}; every rank applies it.
void ModelCheckpoint::check(Trainer& trainer, bool at_epoch_end) {
  if (trainer.options().fast_dev_run > 0) return;  // Lightning's: fast_dev_run saves nothing (same on every rank)
  const int rank = trainer.global_rank();
  const int64_t epoch = trainer.current_epoch(), step = trainer.global_step();
  const std::map<std::string, double>& logged_values = trainer.callback_metrics();
  auto info = [&](const std::string& m) { trainer.runtime().log(PL_LOG_INFO, m); };
  auto warn = [&](const std::string& m) { trainer.runtime().log(PL_LOG_WARN, m); };
  nlohmann::json d;
  if (rank == 0) {
    const HParams before = state_dict();  // every rank (this one too) applies the decision below
    auto restore = [&] {
      const std::string dir_was = dir_;
      dir_.clear();
      load_state_dict(before);
      dir_ = dir_was;
    };
    try {
      if (dir_.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "ModelCheckpoint has no folder (dirpath) on rank 0");
      std::map<std::string, double> values = logged_values;
      values["epoch"] = static_cast<double>(epoch);
      values["step"] = static_cast<double>(step);
      std::vector<std::string> remove;
      std::string save;
      auto exists = [](const std::string& p) { return std::filesystem::exists(p); };
      // Lightning's name: the template, then "-v1", "-v2", ... while the folder exists (unless it is
      // the one this save replaces).
      auto name_for = [&](const std::string& replaces) {
        const std::string base = dir_ + "/" + format_checkpoint_name(values);
        std::string p = base;
        for (int v = 1; exists(p) && p != replaces; ++v) p = base + "-v" + std::to_string(v);
        return p;
      };
      if (o_.monitor.empty()) {
        if (o_.save_top_k != 0) {
          const std::string previous = best_path_;
          save = name_for(best_path_);
          best_path_ = last_path_ = save;
          if (o_.save_top_k == 1 && !previous.empty() && previous != save) remove.push_back(previous);
        }
      } else if (o_.save_top_k == 0) {
        // no top k to keep: the monitor is not read (only `last` is saved)
      } else if (auto it = logged_values.find(o_.monitor); it == logged_values.end()) {
        std::string logged;
        for (const auto& kv : logged_values) logged += (logged.empty() ? "" : ", ") + kv.first;
        const std::string msg =
            "ModelCheckpoint(monitor='" + o_.monitor +
            "') found no logged value of that name; logged: " + (logged.empty() ? "(none)" : logged) +
            ". Log it with log(\"" + o_.monitor + "\", value) in the LightningModule";
        // Lightning's rule: an error once validation has run in this fit (the value should be
        // there by now), else a warning (e.g. a step-cadence check before the first validation)
        if (trainer.validation_has_run()) throw Error(PL_ERR_INVALID_ARGUMENT, msg);
        if (!warned_) d["warn"] = msg + "; no top-k checkpoint is saved until it is logged";
        warned_ = true;
      } else {
        double current = it->second;
        if (std::isnan(current)) current = o_.mode == "min" ? kInf : -kInf;
        const auto k = o_.save_top_k;
        const bool enter =
            k == -1 || (k > 0 && (static_cast<int64_t>(best_k_.size()) < k || better(current, kth_score_)));
        if (enter) {
          std::string dropped;
          if (k > 0 && static_cast<int64_t>(best_k_.size()) == k && !kth_path_.empty()) dropped = kth_path_;
          save = name_for(dropped);
          if (!dropped.empty()) {
            best_k_.erase(dropped);
            if (dropped != save) remove.push_back(dropped);
          }
          best_k_[save] = current;
          auto worst = best_k_.begin(), best = best_k_.begin();
          for (auto jt = best_k_.begin(); jt != best_k_.end(); ++jt) {
            if (better(worst->second, jt->second)) worst = jt;
            if (better(jt->second, best->second)) best = jt;
          }
          kth_path_ = worst->first, kth_score_ = worst->second;
          best_path_ = best->first, best_score_ = best->second;
          last_path_ = save;
          if (o_.verbose)
            info("ModelCheckpoint: epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + ": " +
                 o_.monitor + " = " + plrt::sdk::shortest(current) + " enters the top " + std::to_string(k) +
                 ", saving " + save);
        } else if (o_.verbose) {
          info("ModelCheckpoint: epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + ": " +
               o_.monitor + " = " + plrt::sdk::shortest(current) + " is not in the top " + std::to_string(k));
        }
      }
      std::string last;
      if (o_.save_last) {
        last = dir_ + "/last";
        // the trainer writes <log_dir>/checkpoints/last at every epoch's end anyway
        if (at_epoch_end && last == trainer.log_dir() + "/checkpoints/last") last.clear();
        last_path_ = dir_ + "/last";
      }
      d["save"] = save;
      d["remove"] = remove;
      d["last"] = last;
      d["state"] = hparams_to_json(state_dict());
      restore();
    } catch (const std::exception& e) {
      restore();
      d = {{"error", e.what()}};
    }
  }
  const std::string told = trainer.broadcast(d.dump());  // one collective: every rank learns it
  d = nlohmann::json::parse(told);
  if (d.contains("error")) throw Error(PL_ERR_INVALID_ARGUMENT, d["error"].get<std::string>());
  if (d.contains("warn") && rank == 0) warn(d["warn"].get<std::string>());
  const HParams s = hparams_from_json(d["state"], "rank 0's ModelCheckpoint decision");
  const std::string dir_was = dir_;
  dir_.clear();  // load_state_dict keeps its folder check for a checkpoint's state, not for this
  load_state_dict(s);
  dir_ = dir_was;
  const std::string save = d["save"].get<std::string>();
  const std::string last = d["last"].get<std::string>();
  if (save.empty() && last.empty()) return;
  const int64_t saved_before = last_step_saved_;
  last_step_saved_ = step;  // in the saved state: a resumed run does not save this step again
  try {
    if (!save.empty()) trainer.save_checkpoint(save);  // collective; rank 0 writes
    if (!last.empty()) trainer.save_checkpoint(last);
  } catch (...) {
    last_step_saved_ = saved_before;
    throw;
  }
  if (rank != 0) return;
  for (const auto& p : d["remove"]) {
    std::error_code ec;
    std::filesystem::remove_all(p.get<std::string>(), ec);
    if (ec) warn("ModelCheckpoint could not remove " + p.get<std::string>() + ": " + ec.message());
  }
}

}  // namespace pl
