// Preemption (Lightning's SLURM behaviour): SLURM, and Kubernetes, send SIGTERM some time before
// they kill a job (`sbatch --signal=TERM@<s>`, scancel, a node drained, the time limit's KillWait).
// plrun passes its SIGTERM on to the workers (SIGKILL after --grace-period) and restarts workers that
// exit with one's code under --max-restarts.  While fit runs with checkpoint_on_sigterm on (by
// default when SLURM or plrun launched the job), a SIGTERM
// only sets a flag.  The ranks agree on it with one reduce (MAX) after an optimizer step, so they all
// stop after the same step even when the signal reached them at different points; then fit writes
// checkpoints/last (batches_done says where to resume) and returns, with interrupted() true.
// Cost: one small collective about every kAgreeEveryMs of training, not every step: the same reduce
// carries rank 0's count of the steps until the next one (from its own step time), so every rank
// skips the same steps.  Measured before this, with one reduce per step: 2 ranks of
// bench/preempt_steps.py's model ran at 0.61 x the speed without the watch (a 2-value gloo
// allreduce costs ~1.5 ms on a loaded 2-core machine, against a 2.3 ms step).  A SIGTERM is then
// honoured within kAgreeEveryMs and a step.  checkpoint_every_seconds' decision rides in the same
// reduce, and so does Trainer::should_stop while the fit has callbacks (one of them may set it
// inside an epoch, on one rank: every rank then stops after the same step).
#include <algorithm>
#include <chrono>
#include <cmath>
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

// One reduce (MAX) of four values when any is needed: any rank's SIGTERM, rank 0's clock for
// checkpoint_every_seconds, and rank 0's count of steps until the next agreement (the other ranks
// send 0 for those two, so rank 0 decides: the ranks' clocks differ, and both a save and the
// next reduce are collectives that every rank must enter together), and any rank's should_stop.
Trainer::Impl::StepAgreement Trainer::Impl::agree_after_step() {
  const bool watch = sigterm_watch && sigterm_watch->on();
  const bool timed = o.enable_checkpointing && o.checkpoint_every_seconds > 0;
  const bool stoppable = !cbs.empty();  // a callback may set should_stop inside an epoch
  if (!watch && !timed && !stoppable) return {};
  ++steps_since_agreement;
  if (--agree_countdown > 0) return {};
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_checkpoint).count();
  double next = 1;  // rank 0: the steps that fit in kAgreeEveryMs at the pace since the last agreement
  if (rank == 0) {
    const double per_step_ms =
        std::chrono::duration<double, std::milli>(now - last_agreement).count() / double(steps_since_agreement);
    // A time cadence shorter than kAgreeEveryMs is honoured at its own pace.
    const double target_ms = timed ? std::min(kAgreeEveryMs, o.checkpoint_every_seconds * 1000) : kAgreeEveryMs;
    next = std::clamp(std::floor(target_ms / std::max(per_step_ms, 1e-3)), 1.0, double(kMaxAgreeSteps));
  }
  std::vector<double> flags{watch && g_sigterm != 0 ? 1.0 : 0.0,
                            timed && rank == 0 && elapsed >= o.checkpoint_every_seconds ? 1.0 : 0.0,
                            rank == 0 ? next : 0.0, should_stop ? 1.0 : 0.0};
  if (world > 1) collectives().allreduce(flags, PL_REDUCE_MAX);
  agree_countdown = static_cast<int64_t>(flags[2]);
  steps_since_agreement = 0;
  last_agreement = std::chrono::steady_clock::now();
  return {flags[0] > 0, flags[1] > 0, flags[3] > 0};
}

void Trainer::Impl::reset_agreement() {
  agree_countdown = 0;  // the first step of a fit agrees
  steps_since_agreement = 0;
  last_agreement = std::chrono::steady_clock::now();
}

bool Trainer::Impl::watch_sigterm() const {
  return o.checkpoint_on_sigterm.value_or(env.source == "slurm" || env.source == "plrun");
}

}  // namespace pl
