// Crash-safe writes: a reader sees the old contents or the new, never a mix.
#pragma once

#include <string>

namespace pl {

// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path` and fsyncs
// the folder.  Throws pl::Error naming the path and errno's text.
void write_file_atomic(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);  // throws naming the path

// A folder of files written as one unit (a checkpoint): files go into "<path>.tmp-<pid>", each
// fsynced; then that folder replaces `path` in one step (renameat2 RENAME_EXCHANGE when `path`
// exists, else rename), and the old contents are removed.  commit() throws on failure; a
// destructor without commit() removes the temporary folder.
class AtomicDir {
 public:
  explicit AtomicDir(std::string path);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  const std::string& temp_path() const { return tmp_; }
  void write(const std::string& name, const std::string& bytes);  // a file in the folder, fsynced
  void commit();

 private:
  std::string path_, tmp_;
  bool committed_ = false;
};

// Removes leftovers of interrupted AtomicDir writes for `path` ("<path>.tmp-*" whose process is gone).
void clean_atomic_leftovers(const std::string& path);

}  // namespace pl
