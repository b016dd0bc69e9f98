// The store's server.  Everything below runs on the one io thread, except the constructor (binds
// before the thread starts) and the destructor (posts the shutdown, then joins).
#include "store/server.hpp"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <charconv>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "error.hpp"
#include "store/protocol.hpp"

namespace plrt::store {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::chrono::seconds kHandshakeTimeout{30};
constexpr std::chrono::milliseconds kMaxWait{std::chrono::hours(24 * 365)};

std::string endpoint_text(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

// A stored counter: decimal text, as TCPStore writes it.
bool parse_counter(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

std::string in_quotes(const std::string& s, size_t limit = 64) {
  return "'" + (s.size() > limit ? s.substr(0, limit) + "..." : s) + "'";
}

}  // namespace

class Session;

class Server::Impl {
 public:
  Impl(std::shared_ptr<spdlog::logger> logger, std::string token) : log(std::move(logger)), token(std::move(token)) {}

  void accept();
  void shutdown();
  void notify(const std::string& key);
  void watch(const std::shared_ptr<Session>& s, const std::vector<std::string>& keys) {
    for (const auto& k : keys) waiters[k].push_back(s);
  }
  void unwatch(const Session* s, const std::vector<std::string>& keys);
  bool all_exist(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }

  // Declared first: destroyed last, after every object that holds an io object.
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::shared_ptr<spdlog::logger> log;
  std::string token;
  std::string where;  // host:port, for messages
  uint16_t port = 0;
  std::thread thread;

  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Session>>> waiters;
  std::unordered_set<std::shared_ptr<Session>> sessions;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& srv, tcp::socket socket, std::string peer)
      : peer(std::move(peer)), srv_(srv), socket_(std::move(socket)), timer_(srv.io) {}

  void start() {
    arm_timer(kHandshakeTimeout, [](Session& s) { s.drop("no handshake within 30 s"); });
    read();
  }

  // Closes the socket and forgets the session (idempotent).
  void close() {
    if (closed_) return;
    closed_ = true;
    if (waiting_) finish_wait();
    ++timer_gen_;
    timer_.cancel();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    srv_.sessions.erase(shared_from_this());
  }

  // One of the keys this session waits for was written: answer if all of them exist now.
  void key_ready() {
    if (!waiting_ || !srv_.all_exist(wait_keys_)) return;
    Op op = wait_op_;
    std::string key = wait_keys_.front();
    finish_wait();
    if (op == Op::Get)
      reply({Reply::Value, srv_.data[key], 0, {}});
    else
      reply({Reply::Ok, {}, 0, {}});
  }

  const std::string peer;

 private:
  template <class Fn>
  void arm_timer(std::chrono::milliseconds after, Fn fn) {
    uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::min(after, kMaxWait));
    timer_.async_wait([self = shared_from_this(), gen, fn](const error_code& ec) {
      if (!ec && gen == self->timer_gen_ && !self->closed_) fn(*self);
    });
  }

  void drop(const std::string& reason) {
    srv_.log->warn("closing the store connection from {}: {}", peer, reason);
    close();
  }

  void read() {
    if (closed_ || reading_ || writing_ || close_after_write_) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(chunk_),
                            [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
  }

  void on_read(const error_code& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (!in_.empty())
        drop("the peer closed the connection in the middle of a frame (" + std::to_string(in_.size()) +
             " bytes received): " + ec.message());
      else {
        srv_.log->debug("store connection from {} closed{}: {}", peer,
                        waiting_ ? " while waiting for " + in_quotes(wait_keys_.front()) : "", ec.message());
        close();
      }
      return;
    }
    in_.insert(in_.end(), chunk_.begin(), chunk_.begin() + n);
    size_t off = 0;
    while (!closed_ && !close_after_write_) {
      size_t len = 0;
      size_t limit = authed_ ? kMaxFrame : kMaxHandshakeFrame;
      FrameStatus st = peek_frame(in_.data() + off, in_.size() - off, limit, &len);
      if (st == FrameStatus::TooLarge) {
        drop("a frame of " + std::to_string(len) + " bytes exceeds the limit of " + std::to_string(limit) +
             (authed_ ? " bytes" : " bytes before the handshake"));
        return;
      }
      if (st == FrameStatus::NeedMore) break;
      const uint8_t* payload = in_.data() + off + kHeaderSize;
      off += kHeaderSize + len;
      if (!handle(payload, len)) break;
    }
    if (closed_) return;
    in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(off));
    read();
  }

  // Returns false when the connection is being closed.
  bool handle(const uint8_t* payload, size_t size) {
    Request r;
    std::string why;
    if (!decode_request(payload, size, &r, &why)) {
      drop("malformed message: " + why);
      return false;
    }
    if (!authed_) return handshake(r);
    if (r.op == Op::Hello) {
      drop("a second handshake");
      return false;
    }
    if (waiting_) {
      drop(std::string("a ") + op_name(r.op) + " request while its " + op_name(wait_op_) + " was still waiting");
      return false;
    }
    execute(r);
    return true;
  }

  bool handshake(const Request& r) {
    if (r.op != Op::Hello) {
      drop(std::string("a ") + op_name(r.op) + " request before the handshake");
      return false;
    }
    ++timer_gen_;
    timer_.cancel();
    if (r.version != kProtocolVersion) {
      std::string msg = "protocol version " + std::to_string(r.version) + "; this server speaks version " +
                        std::to_string(kProtocolVersion);
      srv_.log->warn("refused a store connection from {}: {}", peer, msg);
      reply({Reply::Error, msg, 0, {}});
      close_after_write_ = true;
      return false;
    }
    if (!tokens_equal(r.value, srv_.token)) {
      srv_.log->warn("refused a store connection from {}: wrong job token", peer);
      reply({Reply::BadToken, {}, 0, {}});
      close_after_write_ = true;
      return false;
    }
    authed_ = true;
    srv_.log->debug("store connection from {} authenticated", peer);
    reply({Reply::Ok, {}, 0, {}});
    return true;
  }

  void execute(Request& r) {
    auto& data = srv_.data;
    switch (r.op) {
      case Op::Set:
        data[r.key] = std::move(r.value);
        reply({Reply::Ok, {}, 0, {}});
        srv_.notify(r.key);
        break;
      case Op::Get:
        if (auto it = data.find(r.key); it != data.end())
          reply({Reply::Value, it->second, 0, {}});
        else
          begin_wait(Op::Get, {r.key}, r.number);
        break;
      case Op::Add: {
        int64_t value = 0;
        auto it = data.find(r.key);
        if (it != data.end() && !parse_counter(it->second, &value)) {
          reply({Reply::Error,
                 "add: the value of " + in_quotes(r.key) + " is not an integer: " + in_quotes(it->second),
                 0,
                 {}});
          break;
        }
        if (__builtin_add_overflow(value, r.number, &value)) {
          reply({Reply::Error,
                 "add: " + in_quotes(r.key) + " + " + std::to_string(r.number) + " overflows int64",
                 0,
                 {}});
          break;
        }
        data[r.key] = std::to_string(value);
        reply({Reply::Int, {}, value, {}});
        srv_.notify(r.key);
        break;
      }
      case Op::CompareSet: {
        // TCPStore's rules: absent + empty expected sets it; absent + anything else answers
        // `expected` and leaves it absent; present + equal sets it; the reply is the value now.
        auto it = data.find(r.key);
        if (it == data.end()) {
          if (!r.value.empty()) {
            reply({Reply::Value, r.value, 0, {}});
            break;
          }
          it = data.emplace(r.key, std::move(r.desired)).first;
        } else if (it->second == r.value) {
          it->second = std::move(r.desired);
        } else {
          reply({Reply::Value, it->second, 0, {}});
          break;
        }
        reply({Reply::Value, it->second, 0, {}});
        srv_.notify(r.key);
        break;
      }
      case Op::Remove:
        reply({Reply::Bool, {}, data.erase(r.key) ? 1 : 0, {}});
        break;
      case Op::Check:
        reply({Reply::Bool, {}, srv_.all_exist(r.keys) ? 1 : 0, {}});
        break;
      case Op::Wait:
        if (srv_.all_exist(r.keys))
          reply({Reply::Ok, {}, 0, {}});
        else
          begin_wait(Op::Wait, std::move(r.keys), r.number);
        break;
      case Op::NumKeys:
        reply({Reply::Int, {}, static_cast<int64_t>(data.size()), {}});
        break;
      case Op::Hello:
        break;  // handled in handle()
    }
  }

  void begin_wait(Op op, std::vector<std::string> keys, int64_t timeout_ms) {
    waiting_ = true;
    wait_op_ = op;
    wait_keys_ = std::move(keys);
    srv_.watch(shared_from_this(), wait_keys_);
    arm_timer(std::chrono::milliseconds(std::min<int64_t>(timeout_ms, kMaxWait.count())), [](Session& s) {
      std::vector<std::string> missing;
      for (const auto& k : s.wait_keys_)
        if (!s.srv_.data.count(k)) missing.push_back(k);
      s.srv_.log->debug("store {} from {} timed out", op_name(s.wait_op_), s.peer);
      s.finish_wait();
      s.reply({Reply::Timeout, {}, 0, std::move(missing)});
    });
  }

  void finish_wait() {
    waiting_ = false;
    ++timer_gen_;
    timer_.cancel();
    srv_.unwatch(this, wait_keys_);
    wait_keys_.clear();
  }

  void reply(const Response& response) {
    if (closed_) return;
    try {
      out_.push_back(encode_response(response));
    } catch (const std::exception& e) {
      drop(std::string("cannot encode the reply: ") + e.what());
      return;
    }
    if (!writing_) write();
  }

  void write() {
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](const error_code& ec, size_t) { self->on_write(ec); });
  }

  void on_write(const error_code& ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      srv_.log->debug("store connection from {}: write failed: {}", peer, ec.message());
      close();
      return;
    }
    out_.pop_front();
    if (!out_.empty()) return write();
    if (close_after_write_) return close();
    read();
  }

  Server::Impl& srv_;
  tcp::socket socket_;
  asio::steady_timer timer_;  // the handshake deadline, then each get/wait's timeout
  uint64_t timer_gen_ = 0;    // a fired timer whose generation is stale does nothing
  std::array<uint8_t, 64 * 1024> chunk_;
  std::vector<uint8_t> in_;      // bytes received and not yet handled (at most one partial frame)
  std::deque<std::string> out_;  // replies being written
  bool authed_ = false, closed_ = false, reading_ = false, writing_ = false, close_after_write_ = false;
  bool waiting_ = false;  // a get or wait is pending
  Op wait_op_ = Op::Wait;
  std::vector<std::string> wait_keys_;
};

void Server::Impl::notify(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  auto sessions_waiting = it->second;  // key_ready() edits `waiters`
  for (auto& s : sessions_waiting) s->key_ready();
}

void Server::Impl::unwatch(const Session* s, const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    auto it = waiters.find(k);
    if (it == waiters.end()) continue;
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(), [s](const auto& p) { return p.get() == s; }), v.end());
    if (v.empty()) waiters.erase(it);
  }
}

void Server::Impl::accept() {
  acceptor.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      log->warn("store server on {}: accept failed: {}", where, ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const error_code& e) {
        if (!e) accept();
      });
      return;
    }
    error_code e;
    socket.set_option(tcp::no_delay(true), e);
    tcp::endpoint remote = socket.remote_endpoint(e);
    std::string peer = e ? std::string("an unknown peer") : endpoint_text(remote);
    log->debug("store connection from {}", peer);
    auto session = std::make_shared<Session>(*this, std::move(socket), std::move(peer));
    sessions.insert(session);
    session->start();
    accept();
  });
}

void Server::Impl::shutdown() {
  error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  auto all = sessions;
  for (auto& s : all) s->close();
  waiters.clear();
  work.reset();
}

Server::Server(std::shared_ptr<spdlog::logger> logger, const std::string& host, uint16_t port, std::string token)
    : impl_(std::make_unique<Impl>(std::move(logger), std::move(token))) {
  Impl& m = *impl_;
  std::string asked = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  tcp::resolver resolver(m.io);
  error_code ec;
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec)
    rt::fail(PL_ERR_RUNTIME, "cannot serve the store on " + asked + ": cannot resolve '" + host + "': " + ec.message());
  std::string errors;
  for (const auto& entry : results) {
    tcp::endpoint ep = entry.endpoint();
    error_code e;
    m.acceptor.open(ep.protocol(), e);
    if (!e) m.acceptor.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) m.acceptor.bind(ep, e);
    if (!e) m.acceptor.listen(asio::socket_base::max_listen_connections, e);
    if (!e) break;
    errors += (errors.empty() ? "" : "; ") + endpoint_text(ep) + ": " + e.message();
    error_code ignored;
    m.acceptor.close(ignored);
  }
  if (!m.acceptor.is_open())
    rt::fail(PL_ERR_RUNTIME, "cannot serve the store on " + asked + ": " + (errors.empty() ? "no address" : errors));
  m.port = m.acceptor.local_endpoint().port();
  m.where = endpoint_text(m.acceptor.local_endpoint());
  m.accept();
  m.thread = std::thread([&m] {
    for (;;) {
      try {
        m.io.run();
        return;
      } catch (const std::exception& e) {
        m.log->error("store server on {}: {}", m.where, e.what());
      }
    }
  });
  m.log->info("serving the store on {}", m.where);
}

Server::~Server() {
  Impl& m = *impl_;
  asio::post(m.io, [&m] { m.shutdown(); });
  if (m.thread.joinable()) m.thread.join();
}

uint16_t Server::port() const { return impl_->port; }

}  // namespace plrt::store
