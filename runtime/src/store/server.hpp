// The store's server: one Boost.Asio io thread serving the key-value map to every connection.
// Requests are answered in the order they arrive; get and wait are answered later (when their
// keys appear, or with "timeout" when their timer fires).  A connection that breaks the protocol
// is closed alone, with a warning naming its address and the reason.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <memory>
#include <string>

namespace plrt::store {

class Server {
 public:
  // Binds `host` (resolved; every address it names is tried in order) at `port` (0: a free one)
  // and starts serving.  Throws plrt::rt::Error naming host:port when it cannot bind.
  Server(std::shared_ptr<spdlog::logger> logger, const std::string& host, uint16_t port, std::string token);
  ~Server();  // stops serving, closes every connection and joins the io thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace plrt::store
