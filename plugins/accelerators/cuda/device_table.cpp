// The device table's JSON form (see device_table.hpp): strict reading, with errors that name the
// field and what would be valid, and writing.
#include "device_table.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "plugin_support.hpp"

namespace plrt::cuda {

using plrt::plugin::fail;

namespace {

using nlohmann::json;

struct Reader {
  std::string origin;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail(PL_ERR_INVALID_ARGUMENT, origin + ": " + field + " " + what);
  }

  // Rejects keys outside `valid`, so that a typo ("utilisation_percent") is not silently ignored.
  void only_keys(const json& j, const std::string& field, const std::set<std::string>& valid) const {
    for (const auto& item : j.items()) {
      if (valid.count(item.key())) continue;
      std::string list;
      for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
      bad(field, "has an unknown key '" + item.key() + "'; valid keys: " + list);
    }
  }

  std::string string_at(const json& j, const char* key, const std::string& field) const {
    if (!j.contains(key) || j[key].is_null()) return {};
    if (!j[key].is_string()) bad(field + "." + key, "is " + j[key].dump() + ", not a string");
    return j[key].get<std::string>();
  }

  int64_t integer(const json& v, const std::string& field, int64_t min) const {
    if (!v.is_number_integer()) bad(field, "is " + v.dump() + ", not an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(field, "is too large");
    const int64_t n = v.get<int64_t>();
    if (n < min) bad(field, "is " + std::to_string(n) + "; it must be >= " + std::to_string(min));
    return n;
  }

  ComputeMode mode(const json& v, const std::string& field) const {
    const std::string valid = "; valid: default, exclusive_process, exclusive_thread, prohibited, unknown";
    if (v.is_null()) return ComputeMode::kUnknown;
    if (!v.is_string()) bad(field, "is " + v.dump() + ", not a string" + valid);
    const std::string s = v.get<std::string>();
    for (ComputeMode m : {ComputeMode::kUnknown, ComputeMode::kDefault, ComputeMode::kExclusiveProcess,
                          ComputeMode::kExclusiveThread, ComputeMode::kProhibited})
      if (s == compute_mode_name(m)) return m;
    bad(field, "is \"" + s + "\"" + valid);
  }

  DeviceRecord device(const json& j, int32_t position, const std::string& field) const {
    if (!j.is_object()) bad(field, "is " + j.dump() + ", not an object");
    only_keys(
        j, field,
        {"index", "name", "uuid", "compute_mode", "processes", "utilization_percent", "context_ok", "context_error"});
    DeviceRecord d;
    d.index = position;
    if (j.contains("index")) {
      const int64_t index = integer(j["index"], field + ".index", 0);
      if (index != position)
        bad(field + ".index", "is " + std::to_string(index) +
                                  "; the table lists CUDA's visible devices in order, so "
                                  "it must be " +
                                  std::to_string(position) + " (or be left out)");
    }
    d.name = string_at(j, "name", field);
    d.uuid = string_at(j, "uuid", field);
    if (j.contains("compute_mode")) d.compute_mode = mode(j["compute_mode"], field + ".compute_mode");
    if (j.contains("processes") && !j["processes"].is_null()) {
      const json& ps = j["processes"];
      if (!ps.is_array()) bad(field + ".processes", "is " + ps.dump() + ", not a list of {\"pid\", \"used_bytes\"}");
      for (size_t i = 0; i < ps.size(); ++i) {
        const std::string pf = field + ".processes[" + std::to_string(i) + "]";
        if (!ps[i].is_object()) bad(pf, "is " + ps[i].dump() + ", not an object {\"pid\", \"used_bytes\"}");
        only_keys(ps[i], pf, {"pid", "used_bytes"});
        if (!ps[i].contains("pid")) bad(pf, "has no \"pid\"");
        ForeignProcess p;
        p.pid = integer(ps[i]["pid"], pf + ".pid", 0);
        if (ps[i].contains("used_bytes") && !ps[i]["used_bytes"].is_null()) {
          const json& u = ps[i]["used_bytes"];
          if (!u.is_number_integer() || (!u.is_number_unsigned() && u.get<int64_t>() < 0))
            bad(pf + ".used_bytes", "is " + u.dump() + "; valid: a number of bytes >= 0, or null (unknown)");
          p.used_bytes = u.get<uint64_t>();
        }
        d.processes.push_back(p);
      }
    }
    if (j.contains("utilization_percent") && !j["utilization_percent"].is_null()) {
      const json& u = j["utilization_percent"];
      const std::string valid = "; valid: a percentage from 0 to 100, or null (unknown)";
      if (!u.is_number()) bad(field + ".utilization_percent", "is " + u.dump() + ", not a number" + valid);
      const double v = u.get<double>();
      if (!(v >= 0 && v <= 100)) bad(field + ".utilization_percent", "is " + u.dump() + valid);
      d.utilization_percent = v;
    }
    if (j.contains("context_ok")) {
      if (!j["context_ok"].is_boolean())
        bad(field + ".context_ok", "is " + j["context_ok"].dump() + ", not true or false");
      d.context_ok = j["context_ok"].get<bool>();
    }
    d.context_error = string_at(j, "context_error", field);
    if (!d.context_ok && d.context_error.empty()) d.context_error = "(no error message given)";
    return d;
  }
};

json parse(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(PL_ERR_INVALID_ARGUMENT, origin + ": not valid JSON: " + e.what());
  }
}

json device_json(const DeviceRecord& d) {
  json j = {{"index", d.index},
            {"name", d.name},
            {"uuid", d.uuid},
            {"compute_mode", compute_mode_name(d.compute_mode)},
            {"processes", json::array()},
            {"context_ok", d.context_ok}};
  for (const auto& p : d.processes)
    j["processes"].push_back({{"pid", p.pid}, {"used_bytes", p.used_bytes ? json(*p.used_bytes) : json(nullptr)}});
  j["utilization_percent"] = d.utilization_percent ? json(*d.utilization_percent) : json(nullptr);
  if (!d.context_ok) j["context_error"] = d.context_error;
  return j;
}

}  // namespace

const char* compute_mode_name(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::kDefault:
      return "default";
    case ComputeMode::kExclusiveProcess:
      return "exclusive_process";
    case ComputeMode::kExclusiveThread:
      return "exclusive_thread";
    case ComputeMode::kProhibited:
      return "prohibited";
    case ComputeMode::kUnknown:
      break;
  }
  return "unknown";
}

DeviceTable table_from_json(const std::string& text, const std::string& origin) {
  const Reader r{origin};
  const json j = parse(text, origin);
  if (!j.is_object()) r.bad("the table", "is " + j.dump().substr(0, 80) + ", not an object {\"devices\": [...]}");
  r.only_keys(j, "the table", {"devices", "reason", "notes"});
  if (!j.contains("devices"))
    r.bad("the table", "has no \"devices\" list (write \"devices\": [] for a machine without one)");
  if (!j["devices"].is_array()) r.bad("devices", "is " + j["devices"].dump().substr(0, 80) + ", not a list");
  DeviceTable t;
  const json& ds = j["devices"];
  for (size_t i = 0; i < ds.size(); ++i)
    t.devices.push_back(r.device(ds[i], static_cast<int32_t>(i), "devices[" + std::to_string(i) + "]"));
  t.reason = r.string_at(j, "reason", "the table");
  if (j.contains("notes") && !j["notes"].is_null()) {
    if (!j["notes"].is_array()) r.bad("notes", "is " + j["notes"].dump() + ", not a list of strings");
    for (size_t i = 0; i < j["notes"].size(); ++i) {
      if (!j["notes"][i].is_string()) r.bad("notes[" + std::to_string(i) + "]", "is not a string");
      t.notes.push_back(j["notes"][i].get<std::string>());
    }
  }
  return t;
}

std::string table_to_json(const DeviceTable& t) {
  json j = {{"devices", json::array()}, {"reason", t.reason}, {"notes", t.notes}};
  for (const auto& d : t.devices) j["devices"].push_back(device_json(d));
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

DeviceRecord device_from_json(const std::string& text, int32_t position, const std::string& origin,
                              const std::string& field) {
  return Reader{origin}.device(parse(text, origin), position, field);
}

std::string device_to_json(const DeviceRecord& d) {
  return device_json(d).dump(-1, ' ', false, json::error_handler_t::replace);  // a driver's odd bytes stay readable
}

DeviceTable read_table_file(const std::string& path) {
  const std::string origin = "PL_CUDA_DEVICE_TABLE=" + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(PL_ERR_INVALID_ARGUMENT, origin + ": cannot read the file: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return table_from_json(ss.str(), origin);
}

}  // namespace plrt::cuda
