// safetensors by hand (see safetensors.hpp for the format).  The header is written as text in the
// reference writer's order ("__metadata__" first, then the tensors in layout order, each with
// dtype, shape, data_offsets) rather than through a JSON object, whose keys nlohmann would sort;
// nlohmann still escapes the strings and parses headers.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <set>

// The buffer holds little-endian elements, copied as they lie in memory.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pl::safetensors copies tensor bytes as they are in memory; it needs a little-endian host"
#endif

namespace pl::safetensors {

namespace {

using json = nlohmann::json;

struct DTypeName {
  PL_DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{PL_F32, "F32"}, {PL_F64, "F64"}, {PL_F16, "F16"}, {PL_BF16, "BF16"},
                                 {PL_I32, "I32"}, {PL_I64, "I64"}, {PL_U8, "U8"}};
constexpr const char* kValidNames = "F32, F64, F16, BF16, I32, I64, U8";

[[noreturn]] void bad(const std::string& source, const std::string& problem) {
  throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors '" + source + "': " + problem);
}

// JSON text of a string (escaped); invalid UTF-8 throws naming `what`.
std::string quoted(const std::string& s, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors serialize: " + what + " is not valid UTF-8");
  }
}

// A non-negative JSON integer; anything else throws naming `what`.
uint64_t unsigned_field(const json& v, const std::string& source, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) bad(source, what + " is negative (" + v.dump() + ")");
  bad(source, what + " must be a non-negative integer, not " + v.dump());
}

struct Entry {
  std::string name;
  PL_DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const json& info, uint64_t buffer_size, const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (!info.is_object())
    bad(source, where + " must be an object with dtype, shape and data_offsets, not " + info.dump());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) bad(source, where + " has no \"" + key + "\" field");
  Entry e;
  e.name = name;
  const json& dt = info["dtype"];
  if (!dt.is_string()) bad(source, where + ": dtype must be a string, not " + dt.dump());
  const std::string dname = dt.get<std::string>();
  e.dtype = PL_DTYPE_INVALID;
  for (const auto& d : kDTypes)
    if (dname == d.name) e.dtype = d.dtype;
  if (e.dtype == PL_DTYPE_INVALID)
    bad(source, where + ": unknown dtype \"" + dname + "\" (valid: " + kValidNames + ")");

  const json& sh = info["shape"];
  if (!sh.is_array()) bad(source, where + ": shape must be an array, not " + sh.dump());
  if (sh.size() > PL_MAX_DIMS)
    bad(source, where + ": shape " + sh.dump() + " has " + std::to_string(sh.size()) + " dimensions, at most " +
                    std::to_string(PL_MAX_DIMS) + " are supported");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : sh) {
    uint64_t n = unsigned_field(d, source, where + ": shape entry");
    if (n > static_cast<uint64_t>(INT64_MAX)) overflow = true;
    if (n != 0 && numel > static_cast<uint64_t>(INT64_MAX) / n) overflow = true;
    numel = overflow ? 0 : numel * n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const uint64_t elem = pl_dtype_size(e.dtype);
  if (overflow || numel > static_cast<uint64_t>(INT64_MAX) / elem)
    bad(source, where + ": shape " + sh.dump() + " overflows 64 bits");

  const json& off = info["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    bad(source, where + ": data_offsets must be an array [begin, end], not " + off.dump());
  e.begin = unsigned_field(off[0], source, where + ": data_offsets begin");
  e.end = unsigned_field(off[1], source, where + ": data_offsets end");
  if (e.end < e.begin) bad(source, where + ": data_offsets " + off.dump() + " end before begin");
  if (e.end > buffer_size)
    bad(source,
        where + ": data_offsets " + off.dump() + " fall outside the " + std::to_string(buffer_size) + "-byte buffer");
  if (e.end - e.begin != numel * elem)
    bad(source, where + ": data_offsets " + off.dump() + " span " + std::to_string(e.end - e.begin) + " bytes but " +
                    dname + " " + sh.dump() + " needs " + std::to_string(numel * elem));
  return e;
}

// nlohmann keeps the last of duplicate keys silently; the format forbids duplicates, so the
// parse callback tracks the keys of each open object.
json parse_header(const std::string& header, const std::string& source) {
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == json::parse_event_t::key && !open.empty()) {
      std::string k = parsed.get<std::string>();
      if (!open.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(header, cb);
  } catch (const json::exception& e) {
    bad(source, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) bad(source, "the header names \"" + duplicate + "\" twice (duplicate names)");
  if (!j.is_object()) bad(source, "the header must be a JSON object, not " + std::string(j.type_name()));
  return j;
}

}  // namespace

std::string dtype_name(PL_DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors: dtype " + std::to_string(static_cast<int>(dtype)) +
                                           " has no safetensors name (valid: " + kValidNames + ")");
}

PL_DType dtype_from_name(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  throw Error(PL_ERR_INVALID_ARGUMENT,
              "safetensors: unknown dtype \"" + name + "\" (valid: " + std::string(kValidNames) + ")");
}

std::string serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header +=
          (first ? "" : ",") + quoted(k, "metadata key '" + k + "'") + ":" + quoted(v, "metadata value of '" + k + "'");
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors serialize: \"__metadata__\" is reserved, not a tensor name");
    if (!seen.insert(name).second)
      throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors serialize: tensor name '" + name + "' appears twice");
    if (!t.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "safetensors serialize: tensor '" + name + "' is undefined");
    std::string dname = dtype_name(t.dtype());
    host.push_back(t.to_host());
    uint64_t end = offset + t.nbytes();
    std::string shape = "[";
    for (size_t i = 0; i < t.shape().size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape()[i]);
    shape += "]";
    if (header.size() > 1) header += ",";
    header += quoted(name, "tensor name '" + name + "'") + ":{\"dtype\":\"" + dname + "\",\"shape\":" + shape +
              ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  // Spaces up to a multiple of 8, as the reference writer does, so that the buffer starts aligned.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + header.size() + offset);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header;
  for (const Tensor& t : host) out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

File parse(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 8)
    bad(source, "is " + std::to_string(bytes.size()) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxHeaderBytes)
    bad(source, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
                    " bytes (a corrupt or foreign file?)");
  if (n > bytes.size() - 8)
    bad(source, "header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
                    " bytes that follow it (truncated file?)");
  const json header = parse_header(bytes.substr(8, n), source);
  const char* buffer = bytes.data() + 8 + n;
  const uint64_t buffer_size = bytes.size() - 8 - n;

  File file;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) bad(source, "__metadata__ must be an object of strings, not " + info.dump());
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) bad(source, "__metadata__ value of '" + k + "' must be a string, not " + v.dump());
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, buffer_size, source));
  }

  // Sorted by position, the tensors must tile [0, buffer_size) exactly.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      bad(source, "tensor '" + e.name + "' at bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") overlaps tensor '" + prev->name + "' ending at " + std::to_string(covered));
    if (e.begin > covered)
      bad(source, "a gap: bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) + ") before tensor '" +
                      e.name + "' belong to no tensor");
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_size)
    bad(source, "a gap: bytes [" + std::to_string(covered) + ", " + std::to_string(buffer_size) +
                    ") at the end of the buffer belong to no tensor");

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes() > 0) std::memcpy(t.data(), buffer + e.begin, t.nbytes());
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata) {
  std::string bytes;
  try {
    bytes = serialize(tensors, metadata);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " (saving '" + path + "')");
  }
  write_file_atomic(path, bytes);
}

File load(const std::string& path) { return parse(read_file(path), path); }

}  // namespace pl::safetensors
