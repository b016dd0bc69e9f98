// Crash-safe writes: a reader sees the old contents or the new, never a mix, whatever moment the
// writing process is killed at (power loss included, as far as fsync reaches).
#pragma once

#include <string>

namespace pl {

// Writes `bytes` to a temporary file "<path>.tmp-<pid>-<counter>" beside `path`, fsyncs it,
// renames it over `path` and fsyncs the folder.  Throws pl::Error naming the path and errno's
// text; the temporary file is removed on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);  // throws naming the path

// A folder of files written as one unit (a checkpoint): files go into "<path>.tmp-<pid>", each
// fsynced; then that folder replaces `path` in one step (renameat2 RENAME_EXCHANGE when `path`
// exists, else rename), and the old contents are removed.  commit() throws on failure; a
// destructor without commit() removes the temporary folder.  One AtomicDir per `path` at a time
// in a process (the temporary name holds the pid only); a stale folder of that name is replaced.
class AtomicDir {
 public:
  explicit AtomicDir(std::string path);  // creates the temporary folder; throws naming it
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  // A file `name` (a plain name: no '/', not "." or "..") in the folder, fsynced.
  void write(const std::string& name, const std::string& bytes);
  void commit();  // once; a second call throws
  bool committed() const { return committed_; }

 private:
  std::string path_, tmp_;
  bool committed_ = false;
};

// Removes leftovers of interrupted writes for `path` whose process is gone (kill(pid, 0) fails
// with ESRCH): "<path>.tmp-<pid>*" (files of write_file_atomic, folders of AtomicDir) and
// "<path>.old-<pid>" (the fallback commit's old folder).  Should the fallback commit have been
// interrupted between its two renames, so that `path` is missing, the old folder is renamed
// back to `path` (the commit is rolled back).  Leftovers of live processes are kept.
void clean_atomic_leftovers(const std::string& path);

// Whether `name` (a file name, no folder) is such a leftover's: "<base>.tmp-<pid>[-<n>]" or
// "<base>.old-<pid>", with a non-empty base.
bool is_atomic_leftover_name(const std::string& name);
// clean_atomic_leftovers for every target in `folder` that has leftovers there (what a run does at
// its start, when the saves of a killed run left theirs and no later save to the same path would
// clean them).  Returns how many leftover entries went (removed, or renamed back); a missing folder: 0.
int clean_atomic_leftovers_in(const std::string& folder);

}  // namespace pl
