// Persistent threads for the replicas of dp/ddp2: one per replica r >= 1, started once and kept
// until stop(), so a step costs two condition-variable hand-offs instead of n thread creations
// (and a CUDA thread keeps its device binding).  Replica 0 runs on the calling thread.
//
// Nothing escapes a worker: an exception from the task (or from binding the thread) is caught and
// stored for that replica, and the worker always counts itself done, so run() never waits for a
// thread that failed.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace plrt::dp {

class ReplicaPool {
 public:
  using Task = std::function<void(size_t replica)>;

  ReplicaPool() = default;
  ~ReplicaPool() { stop(); }
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // Starts threads for replicas 1..n-1; each first calls bind(r) (on its own thread), once.  A bind
  // that throws makes every later run() report that exception for the replica.  No-op if running.
  void start(size_t n, Task bind);
  bool running() const { return started_; }
  size_t size() const { return n_; }

  // Runs task(r) for every replica at once (r >= 1 on the workers, 0 here) and returns, when all
  // have finished, what each threw (nullptr where it returned).
  std::vector<std::exception_ptr> run(const Task& task);

  // Joins the workers (they finish the task in hand first).  Idempotent.
  void stop() noexcept;

 private:
  void worker_main(size_t r, uint64_t seen);

  size_t n_ = 0;
  bool started_ = false;
  Task bind_;
  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> bind_errors_;  // per replica, set once by its thread

  std::mutex m_;
  std::condition_variable work_cv_, done_cv_;
  const Task* task_ = nullptr;  // the task of generation_, under m_
  uint64_t generation_ = 0;
  size_t remaining_ = 0;  // workers still running generation_'s task
  bool stopping_ = false;
  std::vector<std::exception_ptr> results_;
};

}  // namespace plrt::dp
