// The store's client: POSIX sockets with poll() deadlines, and a small pool of authenticated
// connections so that several threads can use one store at once (a call takes an idle connection
// or opens a new one; one blocked in a long wait does not hold up the others).
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/protocol.hpp"

namespace plrt::store {

class Connection;

class Client {
 public:
  // Opens the first connection, retrying (10 ms backoff growing to 500 ms) for up to timeout_ms.
  // Throws plrt::rt::Error: PL_ERR_RUNTIME naming host:port, the time tried and the last error,
  // or saying that the store refused the job token.
  Client(std::shared_ptr<spdlog::logger> logger, std::string host, uint16_t port, std::string token,
         int64_t timeout_ms);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` and returns the reply, waiting at most answer_timeout_ms for it.  `what`
  // names the call in errors ("get for 'k'").  A connection that fails or runs out of time is
  // closed (PL_ERR_RUNTIME / PL_ERR_TIMEOUT); the others stay in the pool.
  Response call(const Request& request, int64_t answer_timeout_ms, const std::string& what);

  // "host:port", for messages.
  const std::string& where() const { return where_; }

 private:
  std::unique_ptr<Connection> connect();
  std::unique_ptr<Connection> take_idle();
  void give_back(std::unique_ptr<Connection> c);

  std::shared_ptr<spdlog::logger> log_;
  std::string host_;
  uint16_t port_;
  std::string token_;
  int64_t timeout_ms_;
  std::string where_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace plrt::store
