// The trainer's side of the profiler (TrainerOptions::profiler, profiler.hpp): begun with fit once
// the log folder is known, its table and trace written when fit ends, and the action names of the
// module's and the callbacks' calls.
#include <filesystem>
#include <plrt/sdk/atomic_file.hpp>
#include <typeinfo>

#include "trainer_impl.hpp"

namespace pl {

void Trainer::Impl::profile_begin() {
  profiler.begin(plrt::sdk::Profiler::parse(o.profiler, "profiler"));
  strategy.set_profiler(profiler.on() ? &profiler : nullptr);
  profile_t0 = std::chrono::steady_clock::now();
  callback_types.clear();
  module_type = model ? "[LightningModule]" + model->type_name() + "." : std::string();
}

std::string Trainer::Impl::callback_action(size_t i, const char* hook) {
  if (callback_types.size() != cbs.size()) {
    callback_types.clear();
    for (const auto& c : cbs) callback_types.push_back("[Callback]" + plrt::sdk::demangled(typeid(*c)) + ".");
  }
  return callback_types[i] + hook;
}

// Every rank writes its files into rank 0's folder (one broadcast: every rank ends fit here);
// under fast_dev_run, which opens no log folder, into default_root_dir.
void Trainer::Impl::profile_end() {
  if (!profiler.on()) return;
  strategy.set_profiler(nullptr);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - profile_t0).count();
  std::string dir = rank == 0 ? (log_dir.empty() ? o.default_root_dir : log_dir) : std::string();
  if (world > 1) dir = self->broadcast(dir);
  dir += "/profiler";
  const std::string table = profiler.table("FIT", total);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(PL_ERR_RUNTIME, "profiler: cannot create " + dir + ": " + ec.message());
  const std::string r = std::to_string(rank);
  write_file_atomic(dir + "/fit-rank" + r + ".txt", table);
  if (profiler.mode() == plrt::sdk::Profiler::Mode::trace)
    write_file_atomic(dir + "/rank" + r + ".trace.json", profiler.trace_json(rank));
  if (rank == 0)
    info("profiler (" + std::string(plrt::sdk::Profiler::name(profiler.mode())) + "): every rank's report in " + dir +
         "\n" + table);
  profiler.begin(plrt::sdk::Profiler::Mode::off);
}

}  // namespace pl
