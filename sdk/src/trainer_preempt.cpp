// Preemption (Lightning's SLURM behaviour): SLURM, and Kubernetes, send SIGTERM some time before
// they kill a job (`sbatch --signal=TERM@<s>`, scancel, a node drained, the time limit's KillWait).
// plrun passes its SIGTERM on to the workers (SIGKILL after --grace-period) and restarts workers that
// exit with one's code under --max-restarts.  While fit runs with checkpoint_on_sigterm on (by
// default when SLURM or plrun launched the job), a SIGTERM
// only sets a flag.  After every optimizer step the ranks agree on it with one reduce (MAX) of one
// value, so they all stop after the same step even when the signal reached them at different
// points; then fit writes checkpoints/last (batches_done says where to resume) and returns, with
// interrupted() true.  Cost: one small collective per optimizer step while the watch is on (or
// checkpoint_every_seconds, whose decision rides in the same reduce).
#include <chrono>
#include <csignal>

#include "trainer_impl.hpp"

namespace pl {

namespace {

volatile std::sig_atomic_t g_sigterm = 0;

extern "C" void plrt_on_sigterm(int) { g_sigterm = 1; }

}  // namespace

SigtermWatch::SigtermWatch(bool on) {
  if (!on) return;
  g_sigterm = 0;
  struct sigaction sa {};
  sa.sa_handler = plrt_on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or a wait the signal interrupts goes on
  installed_ = sigaction(SIGTERM, &sa, &previous_) == 0;
}

SigtermWatch::~SigtermWatch() {
  if (installed_) sigaction(SIGTERM, &previous_, nullptr);
}

// One reduce (MAX) of two values when either is needed: any rank's SIGTERM, and rank 0's clock for
// checkpoint_every_seconds (the other ranks send 0, so rank 0 decides: the ranks' clocks differ,
// and a save is a collective that every rank must enter together).
Trainer::Impl::StepAgreement Trainer::Impl::agree_after_step() {
  const bool watch = sigterm_watch && sigterm_watch->on();
  const bool timed = o.enable_checkpointing && o.checkpoint_every_seconds > 0;
  if (!watch && !timed) return {};
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count();
  std::vector<double> flags{watch && g_sigterm != 0 ? 1.0 : 0.0,
                            timed && rank == 0 && elapsed >= o.checkpoint_every_seconds ? 1.0 : 0.0};
  if (world > 1) collectives().allreduce(flags, PL_REDUCE_MAX);
  return {flags[0] > 0, flags[1] > 0};
}

bool Trainer::Impl::watch_sigterm() const {
  return o.checkpoint_on_sigterm.value_or(env.source == "slurm" || env.source == "plrun");
}

}  // namespace pl
