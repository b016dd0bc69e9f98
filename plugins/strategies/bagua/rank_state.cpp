// The per-rank state file (rank_state.hpp): the writer, and a reader that checks every length
// against the bytes left before it reads, so that a truncated or damaged file is an error naming
// it, never a read past the end.
#include "rank_state.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "plugin_support.hpp"

namespace plrt::bagua {

using plugin::fail;

namespace {

constexpr char kMagic[8] = {'P', 'L', 'R', 'T', 'B', 'A', 'G', 'U'};
constexpr uint32_t kVersion = 1;
// Limits that a sane file stays far below (a damaged length must not ask for terabytes).
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxEntries = 1u << 24;

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& in, size_t end, const std::string& who, const std::string& path)
      : in_(in), end_(end), who_(who), path_(path) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    if (n > kMaxName) damaged(std::string(what) + " claims " + std::to_string(n) + " bytes");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<uint8_t> get_bytes(uint64_t n, const std::string& what) {
    need(n, what.c_str());
    std::vector<uint8_t> v(in_.begin() + static_cast<std::ptrdiff_t>(pos_),
                           in_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return v;
  }
  size_t pos() const { return pos_; }
  [[noreturn]] void damaged(const std::string& why) const {
    fail(PL_ERR_INVALID_ARGUMENT, who_ + ": load_state: the state file " + path_ + " is damaged: " + why);
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > end_ - pos_)
      damaged(std::string("it ends inside ") + what + " (" + std::to_string(end_) + " bytes before the checksum)");
  }
  const std::vector<uint8_t>& in_;
  size_t end_, pos_ = 0;
  const std::string& who_;
  const std::string& path_;
};

}  // namespace

const StateEntry& RankState::get(const std::string& who, const std::string& file, const std::string& name,
                                 PL_DType dtype, size_t bytes) const {
  for (const auto& e : entries) {
    if (e.name != name) continue;
    if (e.dtype != dtype || e.bytes.size() != bytes)
      fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: the state file " + file + " holds '" + name + "' as " +
                                        std::to_string(e.bytes.size()) + " bytes of " + pl_dtype_name(e.dtype) +
                                        ", but this model has " + std::to_string(bytes) + " bytes of " +
                                        pl_dtype_name(dtype) + " (a checkpoint of another model?)");
    return e;
  }
  fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: the state file " + file + " has no entry '" + name +
                                    "' (a checkpoint of another model, or of other options?)");
}

std::string state_path(const std::string& dir, int32_t rank) {
  std::string d = dir;
  if (!d.empty() && d.back() != '/') d += '/';
  return d + "strategy.bagua.rank" + std::to_string(rank) + ".bin";
}

void write_state(const std::string& who, const std::string& path, const RankState& st) {
  Writer w;
  w.out.insert(w.out.end(), kMagic, kMagic + sizeof kMagic);
  w.put(kVersion);
  w.put_string(st.algorithm);
  w.put(st.rank);
  w.put(st.world);
  w.put(static_cast<uint32_t>(st.entries.size()));
  for (const auto& e : st.entries) {
    w.put_string(e.name);
    w.put(static_cast<int32_t>(e.dtype));
    w.put(static_cast<uint64_t>(e.bytes.size()));
    w.out.insert(w.out.end(), e.bytes.begin(), e.bytes.end());
  }
  w.put(fnv1a(w.out.data(), w.out.size()));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(reinterpret_cast<const char*>(w.out.data()), static_cast<std::streamsize>(w.out.size()));
  if (f) f.close();
  if (!f) fail(PL_ERR_RUNTIME, who + ": save_state: cannot write the state file " + path + ": " + std::strerror(errno));
}

RankState read_state(const std::string& who, const std::string& path, const std::string& algorithm, int32_t rank,
                     int32_t world) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: the state file " + path + " is missing or unreadable (" +
                                      std::strerror(errno) + "); was the checkpoint saved with this strategy?");
  const std::vector<uint8_t> in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: cannot read the state file " + path);
  const size_t min_size = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t);
  Reader head(in, in.size(), who, path);
  if (in.size() < min_size || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    head.damaged("it is " + std::to_string(in.size()) + " bytes and does not begin with the magic PLRTBAGU");
  const size_t end = in.size() - sizeof(uint64_t);
  uint64_t sum;
  std::memcpy(&sum, in.data() + end, sizeof sum);
  Reader r(in, end, who, path);
  r.get_bytes(sizeof kMagic, "the magic");
  const uint32_t version = r.get<uint32_t>("the version");
  if (version != kVersion)
    r.damaged("format version " + std::to_string(version) + ", this plugin reads version " + std::to_string(kVersion));
  if (fnv1a(in.data(), end) != sum) r.damaged("its checksum does not match its contents");
  RankState st;
  st.algorithm = r.get_string("the algorithm's name");
  st.rank = r.get<int32_t>("the rank");
  st.world = r.get<int32_t>("the world size");
  if (st.algorithm != algorithm || st.rank != rank || st.world != world)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: the state file " + path + " was written by algorithm " +
                                      st.algorithm + " at rank " + std::to_string(st.rank) + " of " +
                                      std::to_string(st.world) + ", but this is algorithm " + algorithm + " at rank " +
                                      std::to_string(rank) + " of " + std::to_string(world));
  const uint32_t count = r.get<uint32_t>("the entry count");
  if (count > kMaxEntries) r.damaged("it claims " + std::to_string(count) + " entries");
  for (uint32_t i = 0; i < count; ++i) {
    StateEntry e;
    e.name = r.get_string("an entry's name");
    e.dtype = static_cast<PL_DType>(r.get<int32_t>("an entry's dtype"));
    const uint64_t n = r.get<uint64_t>("an entry's size");
    e.bytes = r.get_bytes(n, "entry '" + e.name + "'");
    st.entries.push_back(std::move(e));
  }
  if (r.pos() != end) r.damaged(std::to_string(end - r.pos()) + " bytes follow the last entry");
  return st;
}

void check_saved_world(const std::string& who, int32_t saved_world, int32_t world) {
  if (saved_world != world)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": load_state: the checkpoint was saved at world size " +
                                      std::to_string(saved_world) + " and this job has world size " +
                                      std::to_string(world) +
                                      ": the state every rank keeps for itself (its weights, its neighbours' "
                                      "replicas) loads at the same world size only");
}

}  // namespace plrt::bagua
