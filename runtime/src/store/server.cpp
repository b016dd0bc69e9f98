// The store's server.  Everything below runs on the one io thread, except the constructor (binds
// before the thread starts) and the destructor (posts the shutdown, then joins).  Floods: pending
// connections (no handshake yet) are bounded by admission.hpp; when accept runs out of
// descriptors the server frees one (the oldest pending connection, else a spare descriptor kept
// for this) and goes on; the warnings a flood causes are rate-limited (throttled_log.hpp).
#include "store/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include "error.hpp"
#include "store/admission.hpp"
#include "store/key_value.hpp"
#include "store/protocol.hpp"
#include "store/throttled_log.hpp"

namespace plrt::store {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::chrono::seconds kHandshakeTimeout{30};
constexpr std::chrono::milliseconds kMaxWait{std::chrono::hours(24 * 365)};
constexpr std::chrono::seconds kWarningPeriod{10};      // a flood's warnings: one line per period
constexpr std::chrono::milliseconds kAcceptRetry{100};  // after an accept error it cannot work around

int open_spare_fd() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

std::string endpoint_text(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

}  // namespace

class Session;

class Server::Impl {
 public:
  Impl(std::shared_ptr<spdlog::logger> logger, std::string token)
      : log(std::move(logger)), token(std::move(token)), pending(AdmissionLimits::for_this_process()) {}

  void accept();
  void on_accept_error(const error_code& ec);
  void admit(tcp::socket socket);
  void evict(uint64_t id, const std::string& why);
  void shutdown();
  void notify(const std::string& key);
  void watch(const std::shared_ptr<Session>& s, const std::vector<std::string>& keys) {
    for (const auto& k : keys) waiters[k].push_back(s);
  }
  void unwatch(const Session* s, const std::vector<std::string>& keys);
  bool all_exist(const std::vector<std::string>& keys) const { return data.all_exist(keys); }

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

  KeyValueMap data;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Session>>> waiters;
  std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions;  // by id
  uint64_t next_id = 0;
  PendingConnections pending;      // sessions that have not sent the handshake
  int spare_fd = open_spare_fd();  // closed to accept (and close) a connection when out of descriptors
  std::string limits_text() const {
    return std::to_string(pending.limits().per_peer) + " per address, " + std::to_string(pending.limits().total) +
           " in all";
  }
  ThrottledWarning evictions{io, log, kWarningPeriod, [this](uint64_t n) {
                               return "store server on " + where + ": closed " + std::to_string(n) +
                                      " more connections that had not sent the handshake (limits: " + limits_text() +
                                      ")";
                             }};
  ThrottledWarning handshake_timeouts{io, log, kWarningPeriod, [this](uint64_t n) {
                                        return "store server on " + where + ": closed " + std::to_string(n) +
                                               " more connections that sent no handshake within 30 s";
                                      }};
  std::string last_accept_error;
  ThrottledWarning accept_failures{io, log, kWarningPeriod, [this](uint64_t n) {
                                     return "store server on " + where + ": accept failed " + std::to_string(n) +
                                            " more times (last: " + last_accept_error + ")";
                                   }};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& srv, uint64_t id, tcp::socket socket, std::string peer)
      : id(id), peer(std::move(peer)), srv_(srv), socket_(std::move(socket)), timer_(srv.io) {}

  void start() {
    arm_timer(kHandshakeTimeout, [](Session& s) {
      s.srv_.handshake_timeouts.warn("closing the store connection from " + s.peer + ": no handshake within 30 s");
      s.close();
    });
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
    srv_.pending.forget(id);
    auto self = shared_from_this();  // the map may hold the last reference
    srv_.sessions.erase(id);
  }

  // One of the keys this session waits for was written: answer if all of them exist now.
  void key_ready() {
    if (!waiting_ || !srv_.all_exist(wait_keys_)) return;
    Op op = wait_op_;
    std::string key = wait_keys_.front();
    finish_wait();
    if (op == Op::Get)
      reply({Reply::Value, srv_.data.at(key), 0, {}});
    else
      reply({Reply::Ok, {}, 0, {}});
  }

  const uint64_t id;
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
    srv_.pending.forget(id);
    srv_.log->debug("store connection from {} authenticated", peer);
    reply({Reply::Ok, {}, 0, {}});
    return true;
  }

  void execute(Request& r) {
    Outcome o = srv_.data.apply(r);
    if (o.reply)
      reply(*o.reply);
    else if (r.op == Op::Get)
      begin_wait(Op::Get, {r.key}, r.number);
    else
      begin_wait(Op::Wait, std::move(r.keys), r.number);
    if (o.changed) srv_.notify(r.key);
  }

  void begin_wait(Op op, std::vector<std::string> keys, int64_t timeout_ms) {
    waiting_ = true;
    wait_op_ = op;
    wait_keys_ = std::move(keys);
    srv_.watch(shared_from_this(), wait_keys_);
    arm_timer(std::chrono::milliseconds(std::min<int64_t>(timeout_ms, kMaxWait.count())), [](Session& s) {
      std::vector<std::string> missing = s.srv_.data.missing(s.wait_keys_);
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
    if (ec) return on_accept_error(ec);
    admit(std::move(socket));
    accept();
  });
}

void Server::Impl::admit(tcp::socket socket) {
  error_code e;
  socket.set_option(tcp::no_delay(true), e);
  tcp::endpoint remote = socket.remote_endpoint(e);
  std::string peer = e ? std::string("an unknown peer") : endpoint_text(remote);
  std::string address = e ? peer : remote.address().to_string();
  log->debug("store connection from {}", peer);
  uint64_t id = ++next_id;
  for (const Eviction& victim : pending.admit(id, address))
    evict(victim.id, victim.per_peer ? "a newer connection from " + address + " is over the limit of " +
                                           std::to_string(pending.limits().per_peer) + " per address"
                                     : "a newer connection is over the limit of " +
                                           std::to_string(pending.limits().total) + " in all");
  auto session = std::make_shared<Session>(*this, id, std::move(socket), std::move(peer));
  sessions.emplace(id, session);
  session->start();
}

// Closes pending connection `id` (already forgotten by `pending`, or the oldest one), with a
// rate-limited warning.
void Server::Impl::evict(uint64_t id, const std::string& why) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  auto victim = it->second;
  evictions.warn("store server on " + where + ": too many connections without a handshake (limits: " + limits_text() +
                 "): closed the oldest, from " + victim->peer + ": " + why +
                 "; more are counted and reported every 10 s");
  victim->close();
}

// EMFILE/ENFILE: Linux reserves the new descriptor before it looks at the listen queue, so accept
// fails even when nobody is waiting (asio tries one accept ahead): then the server waits until a
// connection arrives.  One that is waiting stays in the queue (and epoll reports it again at
// once), so a descriptor is freed first: the oldest pending connection is closed, or, with none,
// the spare descriptor is closed to accept the waiting connection and close it at once (its client
// retries).  Each step ends a connection, so the loop cannot spin; an error it cannot work around
// is retried after kAcceptRetry.  Every failure counts in a rate-limited warning.
void Server::Impl::on_accept_error(const error_code& ec) {
  bool out_of_fds = ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
  pollfd waiting{acceptor.native_handle(), POLLIN, 0};
  if (out_of_fds && ::poll(&waiting, 1, 0) == 0) {  // nobody waits: wait for someone
    acceptor.async_wait(tcp::acceptor::wait_read, [this](const error_code& e) {
      if (!e && acceptor.is_open()) accept();
    });
    return;
  }
  last_accept_error = ec.message();
  std::string action = "retrying in " + std::to_string(kAcceptRetry.count()) + " ms";
  bool again = false;
  if (out_of_fds && pending.oldest()) {
    uint64_t victim = *pending.oldest();
    action = "closed the oldest connection without a handshake to free one";
    if (auto it = sessions.find(victim); it != sessions.end()) {
      action += " (from " + it->second->peer + ")";
      it->second->close();
    }
    pending.forget(victim);
    again = true;
  } else if (out_of_fds && spare_fd >= 0) {
    ::close(spare_fd);
    int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) ::close(fd);
    spare_fd = open_spare_fd();
    if (fd >= 0) action = "closed the next connection at once (its client retries)";
    again = spare_fd >= 0;  // nothing accepted (the peer gave up meanwhile): accept again at once too
  }
  accept_failures.warn("store server on " + where + ": accept failed: " + ec.message() + "; " + action +
                       "; more failures are counted and reported every 10 s");
  if (again) return accept();
  accept_retry.expires_after(kAcceptRetry);
  accept_retry.async_wait([this](const error_code& e) {
    if (!e) accept();
  });
}

void Server::Impl::shutdown() {
  error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  auto all = sessions;
  for (auto& [id, s] : all) s->close();
  waiters.clear();
  for (auto* w : {&evictions, &handshake_timeouts, &accept_failures}) w->flush();
  if (spare_fd >= 0) ::close(spare_fd);
  spare_fd = -1;
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
  m.acceptor.non_blocking(true, ec);  // the spare-descriptor accept must not block (async ones are unaffected)
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
  m.log->info("serving the store on {} (connections without a handshake: {})", m.where, m.limits_text());
}

Server::~Server() {
  Impl& m = *impl_;
  asio::post(m.io, [&m] { m.shutdown(); });
  if (m.thread.joinable()) m.thread.join();
}

uint16_t Server::port() const { return impl_->port; }

}  // namespace plrt::store
