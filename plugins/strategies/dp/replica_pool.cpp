#include "replica_pool.hpp"

#include <utility>

namespace plrt::dp {

void ReplicaPool::start(size_t n, Task bind) {
  if (started_) return;
  n_ = n;
  bind_ = std::move(bind);
  bind_errors_.assign(n, nullptr);
  uint64_t now;
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = false;
    remaining_ = 0;
    task_ = nullptr;
    now = generation_;
  }
  started_ = true;
  try {
    threads_.reserve(n > 0 ? n - 1 : 0);
    // A worker runs every generation after `now`, even one posted before the thread got going.
    for (size_t r = 1; r < n; ++r) threads_.emplace_back([this, r, now] { worker_main(r, now); });
  } catch (...) {  // no thread for a replica: undo, so the pool is all or nothing
    stop();
    throw;
  }
}

void ReplicaPool::worker_main(size_t r, uint64_t seen) {
  try {
    bind_(r);
  } catch (...) {
    bind_errors_[r] = std::current_exception();  // read by this thread only, below
  }
  for (;;) {
    const Task* task;
    {
      std::unique_lock<std::mutex> lock(m_);
      work_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error = bind_errors_[r];
    if (!error) {
      try {
        (*task)(r);
      } catch (...) {
        error = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(m_);
    // Moved, not copied: the worker keeps no reference, so the exception is freed by whoever reads
    // results_ (ordered by the lock), never by this thread later (TSan saw that as a race).
    results_[r] = std::move(error);
    if (--remaining_ == 0) done_cv_.notify_all();
  }
}

std::vector<std::exception_ptr> ReplicaPool::run(const Task& task) {
  {
    std::lock_guard<std::mutex> lock(m_);
    results_.assign(n_, nullptr);
    task_ = &task;
    remaining_ = threads_.size();
    ++generation_;
  }
  work_cv_.notify_all();
  std::exception_ptr first = nullptr;
  try {
    task(0);
  } catch (...) {
    first = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(m_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  if (n_ > 0) results_[0] = first;
  task_ = nullptr;
  return results_;
}

void ReplicaPool::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  started_ = false;
}

}  // namespace plrt::dp
