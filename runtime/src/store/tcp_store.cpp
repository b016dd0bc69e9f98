// The rendezvous store's C API: pl_store_create_tcp / pl_store_port / pl_store_destroy and the
// PL_StoreApi table (set, get, add, ...).  Options are resolved here; the wire work is done by
// store/client.cpp and, in the serving process, store/server.cpp.
#include "store/tcp_store.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime_impl.hpp"
#include "store/client.hpp"
#include "store/server.hpp"

using plrt::rt::fail;
using plrt::rt::guarded;
namespace ps = plrt::store;

struct PL_Store {
  std::shared_ptr<spdlog::logger> logger;  // the runtime's; the store must not outlive its runtime
  std::string host;
  uint16_t port = 0;
  int64_t timeout_ms = 0;
  std::string prefix;                  // before every key (PL_TcpStoreOptions.key_prefix)
  std::unique_ptr<ps::Server> server;  // declared before the client: destroyed after it
  std::unique_ptr<ps::Client> client;
};

namespace {

constexpr int64_t kDefaultTimeoutMs = 300'000;
constexpr int64_t kAnswerGraceMs = 5'000;  // a get/wait's own deadline: its timeout + this
constexpr size_t kKeysInMessages = 8;
// A get or wait longer than this is sent in slices of it, with a look at PL_STORE_JOB_ENDED_KEY
// between two: one CHECK request a second per waiting call, nothing on the fast path.
constexpr int64_t kEndedPollMs = 1'000;

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kKeysInMessages; ++i) out += (i ? ", " : "") + in_quotes(keys[i]);
  if (keys.size() > kKeysInMessages) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out.empty() ? "no keys" : out;
}

// A port from the options or $MASTER_PORT: 0..65535, named in the error otherwise.
uint16_t resolve_port(int32_t option, bool is_server) {
  std::string origin = "PL_TcpStoreOptions.port";
  long long port = option;
  if (option < 0) {
    const char* env = std::getenv("MASTER_PORT");
    if (!env || !*env)
      fail(PL_ERR_INVALID_ARGUMENT, "no store port: PL_TcpStoreOptions.port is " + std::to_string(option) +
                                        " and MASTER_PORT is not set; set MASTER_PORT to a port in 0..65535");
    origin = "MASTER_PORT";
    std::string text = env;
    char* end = nullptr;
    errno = 0;
    port = std::strtoll(env, &end, 10);
    bool digits =
        !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits || errno == ERANGE || *end != '\0' || port > 65535)
      fail(PL_ERR_INVALID_ARGUMENT, "MASTER_PORT='" + text + "' is not a TCP port; valid: 0..65535");
  } else if (option > 65535) {
    fail(PL_ERR_INVALID_ARGUMENT,
         origin + " " + std::to_string(option) + " is not a TCP port; valid: 0..65535, or -1 for $MASTER_PORT");
  }
  if (port == 0 && !is_server)
    fail(PL_ERR_INVALID_ARGUMENT, origin +
                                      " is 0, which only a server may use (it picks a free port); a client "
                                      "needs the server's port, 1..65535");
  return static_cast<uint16_t>(port);
}

PL_Store& store_of(PL_Store* s, const char* fn) {
  if (!s) fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": the store is NULL");
  return *s;
}

// The key as sent: the store's prefix, then `key`.
std::string key_of(const PL_Store& s, const char* key, const char* fn) {
  if (!key) fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": the key is NULL");
  std::string k = s.prefix + key;
  if (k.size() > ps::kMaxKeyLength)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": a key of " + std::to_string(k.size()) + " bytes" +
                                      (s.prefix.empty() ? "" : " (with the prefix '" + s.prefix + "')") +
                                      " is longer than the limit of " + std::to_string(ps::kMaxKeyLength));
  return k;
}

// `key` as the caller named it, for messages.
std::string shown(const PL_Store& s, const std::string& key) {
  return key.compare(0, s.prefix.size(), s.prefix) == 0 ? key.substr(s.prefix.size()) : key;
}
std::vector<std::string> shown(const PL_Store& s, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(shown(s, k));
  return out;
}

std::vector<std::string> keys_of(const PL_Store& s, const char* const* keys, size_t n, const char* fn) {
  if (n > 0 && !keys) fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": keys is NULL");
  if (n > ps::kMaxKeysPerRequest)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": " + std::to_string(n) + " keys exceed the limit of " +
                                      std::to_string(ps::kMaxKeysPerRequest));
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(key_of(s, keys[i], fn));
  return out;
}

std::string bytes_of(const void* data, size_t size, const char* what) {
  if (!data && size > 0)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL with a size of " + std::to_string(size));
  return size ? std::string(static_cast<const char*>(data), size) : std::string();
}

void check_out(const PL_Bytes* out, const char* fn) {
  if (!out) fail(PL_ERR_INVALID_ARGUMENT, std::string("store ") + fn + ": out is NULL");
  if (out->struct_size < PL_STRUCT_SIZE(PL_Bytes, size))
    fail(PL_ERR_VERSION, std::string("store ") + fn + ": PL_Bytes.struct_size " + std::to_string(out->struct_size) +
                             " is smaller than this runtime's " + std::to_string(sizeof(PL_Bytes)));
}

// Hands `value` to the caller in memory it frees with bytes_free (never NULL, even when empty).
void give_bytes(const std::string& value, PL_Bytes* out) {
  void* p = std::malloc(value.empty() ? 1 : value.size());
  if (!p) fail(PL_ERR_RESOURCE, "store: out of memory for a value of " + std::to_string(value.size()) + " bytes");
  if (!value.empty()) std::memcpy(p, value.data(), value.size());
  out->struct_size = sizeof(PL_Bytes);
  out->data = p;
  out->size = value.size();
}

int64_t timeout_or_default(const PL_Store& s, int64_t timeout_ms) { return timeout_ms > 0 ? timeout_ms : s.timeout_ms; }

// How long to wait for the reply to `r`.
int64_t answer_ms(const PL_Store& s, const ps::Request& r) {
  bool timed = r.op == ps::Op::Get || r.op == ps::Op::Wait;
  return !timed ? s.timeout_ms : r.number > INT64_MAX - kAnswerGraceMs ? INT64_MAX : r.number + kAnswerGraceMs;
}

// The reply to `r`: anything but `expected` (or a timeout, for get/wait) is an error.
ps::Response judge(PL_Store& s, const ps::Request& r, ps::Response reply, ps::Reply expected, const std::string& what) {
  bool timed = r.op == ps::Op::Get || r.op == ps::Op::Wait;
  if (reply.kind == expected) return reply;
  if (reply.kind == ps::Reply::Timeout && timed) {
    std::string msg =
        "store " + what + " timed out after " + std::to_string(r.number) + " ms (store " + s.client->where() + ")";
    if (r.keys.size() > 1) msg += "; still missing: " + key_list(shown(s, reply.keys));
    fail(PL_ERR_TIMEOUT, msg);
  }
  if (reply.kind == ps::Reply::Error) fail(PL_ERR_RUNTIME, "store " + what + " failed: " + reply.text);
  fail(PL_ERR_RUNTIME, "store " + what + ": the store at " + s.client->where() + " sent an unexpected '" +
                           ps::reply_name(reply.kind) + "' reply");
}

// One request and its reply, judged.
ps::Response call(PL_Store& s, const ps::Request& r, ps::Reply expected, const std::string& what) {
  return judge(s, r, s.client->call(r, answer_ms(s, r), what), expected, what);
}

ps::Request request(ps::Op op, std::string key = {}) {
  ps::Request r;
  r.op = op;
  r.key = std::move(key);
  return r;
}

// A get or wait (r.number: its timeout in ms).  Past kEndedPollMs it goes in slices, and between
// two it fails with the launcher's text once PL_STORE_JOB_ENDED_KEY exists: the peer it waits for
// has ended, and waiting out the timeout would only hide that.
ps::Response waiting_call(PL_Store& s, ps::Request r, ps::Reply expected, const std::string& what) {
  const int64_t total = r.number;
  if (total <= kEndedPollMs) return call(s, r, expected, what);
  using Clock = std::chrono::steady_clock;
  // A timeout beyond any real wait (INT64_MAX ms) must not overflow the clock.
  const auto now = Clock::now();
  const auto end =
      total >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now).count()
          ? Clock::time_point::max()
          : now + std::chrono::milliseconds(total);
  const std::string ended_key = s.prefix + PL_STORE_JOB_ENDED_KEY;
  for (;;) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    const bool last = left <= kEndedPollMs;  // the last slice ends at the call's own deadline
    r.number = last ? std::max<int64_t>(left, 1) : kEndedPollMs;
    ps::Response reply = s.client->call(r, answer_ms(s, r), what);
    if (last || reply.kind != ps::Reply::Timeout) {
      r.number = total;  // a timeout names the call's whole timeout
      return judge(s, r, std::move(reply), expected, what);
    }
    auto check = request(ps::Op::Check);
    check.keys = {ended_key};
    if (s.client->call(check, s.timeout_ms, "check of '" PL_STORE_JOB_ENDED_KEY "'").number == 0) continue;
    auto get = request(ps::Op::Get, ended_key);
    get.number = kEndedPollMs;
    const std::string why = s.client->call(get, kEndedPollMs + kAnswerGraceMs, "get for the job's end").text;
    fail(PL_ERR_RUNTIME, "store " + what + " stopped waiting: " + why + " (recorded by the launcher in '" +
                             PL_STORE_JOB_ENDED_KEY + "'; store " + s.client->where() + ")");
  }
}

// ---- the table ----
PL_Error* store_set(PL_Store* store, const char* key, const void* value, size_t size) {
  return guarded([&] {
    PL_Store& s = store_of(store, "set");
    auto r = request(ps::Op::Set, key_of(s, key, "set"));
    r.value = bytes_of(value, size, "store set: the value");
    call(s, r, ps::Reply::Ok, "set for " + in_quotes(shown(s, r.key)));
  });
}

PL_Error* store_get(PL_Store* store, const char* key, int64_t timeout_ms, PL_Bytes* out) {
  return guarded([&] {
    PL_Store& s = store_of(store, "get");
    auto r = request(ps::Op::Get, key_of(s, key, "get"));
    check_out(out, "get");
    r.number = timeout_or_default(s, timeout_ms);
    give_bytes(waiting_call(s, r, ps::Reply::Value, "get for " + in_quotes(shown(s, r.key))).text, out);
  });
}

PL_Error* store_add(PL_Store* store, const char* key, int64_t delta, int64_t* out_value) {
  return guarded([&] {
    PL_Store& s = store_of(store, "add");
    auto r = request(ps::Op::Add, key_of(s, key, "add"));
    if (!out_value) fail(PL_ERR_INVALID_ARGUMENT, "store add: out_value is NULL");
    r.number = delta;
    *out_value = call(s, r, ps::Reply::Int, "add to " + in_quotes(shown(s, r.key))).number;
  });
}

PL_Error* store_compare_set(PL_Store* store, const char* key, const void* expected, size_t expected_size,
                            const void* desired, size_t desired_size, PL_Bytes* out_current) {
  return guarded([&] {
    PL_Store& s = store_of(store, "compare_set");
    auto r = request(ps::Op::CompareSet, key_of(s, key, "compare_set"));
    check_out(out_current, "compare_set");
    r.value = bytes_of(expected, expected_size, "store compare_set: expected");
    r.desired = bytes_of(desired, desired_size, "store compare_set: desired");
    give_bytes(call(s, r, ps::Reply::Value, "compare_set for " + in_quotes(shown(s, r.key))).text, out_current);
  });
}

PL_Error* store_remove(PL_Store* store, const char* key, int32_t* out_removed) {
  return guarded([&] {
    PL_Store& s = store_of(store, "remove");
    auto r = request(ps::Op::Remove, key_of(s, key, "remove"));
    int64_t removed = call(s, r, ps::Reply::Bool, "remove of " + in_quotes(shown(s, r.key))).number;
    if (out_removed) *out_removed = static_cast<int32_t>(removed);
  });
}

PL_Error* store_check(PL_Store* store, const char* const* keys, size_t num_keys, int32_t* out_all_exist) {
  return guarded([&] {
    PL_Store& s = store_of(store, "check");
    auto r = request(ps::Op::Check);
    r.keys = keys_of(s, keys, num_keys, "check");
    if (!out_all_exist) fail(PL_ERR_INVALID_ARGUMENT, "store check: out_all_exist is NULL");
    *out_all_exist = static_cast<int32_t>(call(s, r, ps::Reply::Bool, "check of " + key_list(shown(s, r.keys))).number);
  });
}

PL_Error* store_wait(PL_Store* store, const char* const* keys, size_t num_keys, int64_t timeout_ms) {
  return guarded([&] {
    PL_Store& s = store_of(store, "wait");
    auto r = request(ps::Op::Wait);
    r.keys = keys_of(s, keys, num_keys, "wait");
    r.number = timeout_or_default(s, timeout_ms);
    waiting_call(s, r, ps::Reply::Ok, "wait for " + key_list(shown(s, r.keys)));
  });
}

PL_Error* store_num_keys(PL_Store* store, int64_t* out_count) {
  return guarded([&] {
    PL_Store& s = store_of(store, "num_keys");
    if (!out_count) fail(PL_ERR_INVALID_ARGUMENT, "store num_keys: out_count is NULL");
    *out_count = call(s, request(ps::Op::NumKeys), ps::Reply::Int, "num_keys").number;
  });
}

void store_bytes_free(PL_Bytes* bytes) {
  if (!bytes) return;
  std::free(bytes->data);
  bytes->data = nullptr;
  bytes->size = 0;
}

const PL_StoreApi kStoreApi = {sizeof(PL_StoreApi), store_set,   store_get,  store_add,      store_compare_set,
                               store_remove,        store_check, store_wait, store_num_keys, store_bytes_free};

}  // namespace

const PL_StoreApi* plrt::store::tcp_store_api() { return &kStoreApi; }

extern "C" {

PL_EXPORT PL_Error* pl_store_create_tcp(PL_Runtime* runtime, const PL_TcpStoreOptions* options, PL_Store** out) {
  return guarded([&] {
    if (!out) fail(PL_ERR_INVALID_ARGUMENT, "pl_store_create_tcp: out is NULL");
    *out = nullptr;
    if (!runtime) fail(PL_ERR_INVALID_ARGUMENT, "pl_store_create_tcp: runtime is NULL");
    PL_TcpStoreOptions o{};
    o.struct_size = sizeof o;
    o.port = -1;
    if (options) {
      if (options->struct_size < PL_STRUCT_SIZE(PL_TcpStoreOptions, struct_size) ||
          options->struct_size > sizeof(PL_TcpStoreOptions) * 4)
        fail(PL_ERR_VERSION, "PL_TcpStoreOptions.struct_size " + std::to_string(options->struct_size) +
                                 " is not a valid size (this runtime's is " + std::to_string(sizeof o) + ")");
      std::memcpy(&o, options, std::min(options->struct_size, sizeof o));  // the rest keeps its default
    }

    auto s = std::make_unique<PL_Store>();
    s->logger = runtime->logger;
    if (o.host) {
      s->host = o.host;
      if (s->host.empty())
        fail(PL_ERR_INVALID_ARGUMENT,
             "PL_TcpStoreOptions.host is empty; give an address, or NULL for "
             "$MASTER_ADDR (else 127.0.0.1)");
    } else {
      const char* env = std::getenv("MASTER_ADDR");
      s->host = env && *env ? env : "127.0.0.1";
    }
    uint16_t port = resolve_port(o.port, o.is_server != 0);
    const char* token_env = std::getenv("PL_JOB_TOKEN");
    std::string token = o.token ? o.token : (token_env ? token_env : "");
    if (token.size() > ps::kMaxTokenLength)
      fail(PL_ERR_INVALID_ARGUMENT,
           std::string("the job token (") + (o.token ? "PL_TcpStoreOptions.token" : "PL_JOB_TOKEN") + ") has " +
               std::to_string(token.size()) + " bytes; the limit is " + std::to_string(ps::kMaxTokenLength));
    s->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : kDefaultTimeoutMs;
    const bool has_prefix_field = options && PL_HAS_FIELD(PL_TcpStoreOptions, options, key_prefix);
    if (has_prefix_field && o.key_prefix) {
      s->prefix = o.key_prefix;
    } else if (const char* env = std::getenv("PL_STORE_PREFIX")) {
      s->prefix = env;
    }
    if (s->prefix.size() > ps::kMaxKeyLength / 2)
      fail(PL_ERR_INVALID_ARGUMENT,
           std::string("the store's key prefix (") +
               (has_prefix_field && o.key_prefix ? "PL_TcpStoreOptions.key_prefix" : "PL_STORE_PREFIX") + ") has " +
               std::to_string(s->prefix.size()) + " bytes; the limit is " + std::to_string(ps::kMaxKeyLength / 2));

    std::string connect_host = s->host;
    if (o.is_server) {
      s->server = std::make_unique<ps::Server>(s->logger, s->host, port, token);
      port = s->server->port();
      // A server on every interface is reached through the loopback.
      if (s->host == "0.0.0.0") connect_host = "127.0.0.1";
      if (s->host == "::") connect_host = "::1";
    }
    s->port = port;
    if (token.empty())
      s->logger->warn(
          "the store at {}:{} is unauthenticated: no job token (set PL_JOB_TOKEN to one secret shared "
          "by every process of the job)",
          s->host, port);
    s->client = std::make_unique<ps::Client>(s->logger, connect_host, port, token, s->timeout_ms);
    *out = s.release();
  });
}

PL_EXPORT int32_t pl_store_port(const PL_Store* store) { return store ? store->port : 0; }

PL_EXPORT void pl_store_destroy(PL_Store* store) {
  try {
    delete store;
  } catch (...) {
  }
}

}  // extern "C"
