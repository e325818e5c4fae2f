// The rendezvous of the unique id (Rendezvous.h): a file or a TCP socket.
#include "runtime/parallel/Rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "ssmjit/error.h"

namespace ssmjit::parallel {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'S', 'J', 'R', 'V'};

[[noreturn]] void fail(const std::string& address, const std::string& msg) {
  throw Error(Error::Kind::Cuda, "rendezvous " + address + ": " + msg);
}

Clock::time_point deadlineAfter(double s) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}
int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(std::min<int64_t>(left, 1000)) : 0;
}

// The framed message: magic, 4-byte length, the bytes.
std::vector<char> frame(const std::vector<char>& payload) {
  std::vector<char> m(8 + payload.size());
  const auto n = static_cast<uint32_t>(payload.size());
  std::memcpy(m.data(), kMagic, 4);
  std::memcpy(m.data() + 4, &n, 4);
  if (n) std::memcpy(m.data() + 8, payload.data(), n);
  return m;
}
// The payload of a complete frame of `expect` bytes; false while incomplete; throws on garbage.
bool unframe(const std::string& address, const std::vector<char>& m, size_t expect, std::vector<char>* out) {
  if (m.size() < 8) return false;
  if (std::memcmp(m.data(), kMagic, 4) != 0) fail(address, "holds something other than an ssmjit rendezvous");
  uint32_t n = 0;
  std::memcpy(&n, m.data() + 4, 4);
  if (n != expect)
    fail(address, "carries " + std::to_string(n) + " bytes, expected " + std::to_string(expect) +
                      " (another NCCL build on rank 0?)");
  if (m.size() < 8 + n) return false;
  out->assign(m.begin() + 8, m.begin() + 8 + n);
  return true;
}

// --- file -----------------------------------------------------------------------------------

void writeFile(const std::string& path, const std::vector<char>& payload) {
  std::remove(path.c_str());
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    const std::vector<char> m = frame(payload);
    f.write(m.data(), static_cast<std::streamsize>(m.size()));
    if (!f) fail(path, "cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename " + tmp + ": " + std::strerror(errno));
}

std::vector<char> readFile(const std::string& path, size_t expect, double timeout_s) {
  const Clock::time_point deadline = deadlineAfter(timeout_s);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      const std::vector<char> m((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::vector<char> out;
      if (unframe(path, m, expect, &out)) return out;
    }
    if (Clock::now() >= deadline)
      fail(path, "rank 0 did not write it within " + std::to_string(timeout_s) + " s (is rank 0 running, with the same path?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// --- tcp ------------------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

struct HostPort {
  std::string host, port;
};
HostPort parseTcp(const std::string& address) {
  const std::string rest = address.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size())
    throw Error(Error::Kind::InvalidArgument,
                "rendezvous '" + address + "' is not tcp://host:port (e.g. tcp://node0:29500)");
  return {rest.substr(0, colon), rest.substr(colon + 1)};
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};
void resolve(const std::string& address, const HostPort& hp, bool passive, AddrInfo* ai) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  if (int e = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &ai->list))
    fail(address, std::string("cannot resolve: ") + gai_strerror(e));
}

// Sends the whole buffer (a peer that closed early is an error).
void sendAll(const std::string& address, int fd, const std::vector<char>& m) {
  size_t at = 0;
  while (at < m.size()) {
    const ssize_t n = ::send(fd, m.data() + at, m.size() - at, MSG_NOSIGNAL);
    if (n <= 0) fail(address, std::string("sending the id: ") + std::strerror(errno));
    at += static_cast<size_t>(n);
  }
}

void serve(const std::string& address, int peers, const std::vector<char>& payload, double timeout_s) {
  const HostPort hp = parseTcp(address);
  AddrInfo ai;
  resolve(address, hp, true, &ai);
  Fd lis(socket(ai.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (lis.fd < 0) fail(address, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(lis.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lis.fd, ai.list->ai_addr, ai.list->ai_addrlen) != 0)
    fail(address, std::string("rank 0 cannot listen there: ") + std::strerror(errno));
  if (listen(lis.fd, peers + 4) != 0) fail(address, std::string("listen: ") + std::strerror(errno));
  const std::vector<char> m = frame(payload);
  const Clock::time_point deadline = deadlineAfter(timeout_s);
  for (int served = 0; served < peers;) {
    pollfd p{lis.fd, POLLIN, 0};
    const int ready = poll(&p, 1, msLeft(deadline));
    if (ready < 0 && errno != EINTR) fail(address, std::string("poll: ") + std::strerror(errno));
    if (ready > 0) {
      Fd c(accept4(lis.fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (c.fd >= 0) {
        sendAll(address, c.fd, m);
        ++served;
      }
      continue;
    }
    if (Clock::now() >= deadline)
      fail(address, std::to_string(served) + " of " + std::to_string(peers) + " ranks connected within " +
                        std::to_string(timeout_s) + " s (did every rank start, with the same address?)");
  }
}

std::vector<char> fetch(const std::string& address, size_t expect, double timeout_s) {
  const HostPort hp = parseTcp(address);
  const Clock::time_point deadline = deadlineAfter(timeout_s);
  std::string lastError = "no attempt";
  for (;;) {
    AddrInfo ai;
    resolve(address, hp, false, &ai);
    Fd s(socket(ai.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.fd < 0) fail(address, std::string("socket: ") + std::strerror(errno));
    if (connect(s.fd, ai.list->ai_addr, ai.list->ai_addrlen) == 0) {
      std::vector<char> m, out;
      char buf[512];
      for (;;) {
        pollfd p{s.fd, POLLIN, 0};
        const int ready = poll(&p, 1, msLeft(deadline));
        if (ready > 0) {
          const ssize_t n = recv(s.fd, buf, sizeof buf, 0);
          if (n > 0) {
            m.insert(m.end(), buf, buf + n);
            if (unframe(address, m, expect, &out)) return out;
            continue;
          }
          lastError = "rank 0 closed the connection early";
          break;
        }
        if (Clock::now() >= deadline) break;
      }
    } else {
      lastError = std::strerror(errno);
    }
    if (Clock::now() >= deadline)
      fail(address, "no id from rank 0 within " + std::to_string(timeout_s) + " s (last: " + lastError + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool isTcp(const std::string& a) { return a.rfind("tcp://", 0) == 0; }
std::string filePath(const std::string& a) { return a.rfind("file://", 0) == 0 ? a.substr(7) : a; }

}  // namespace

std::vector<char> shareFromRankZero(const std::string& address, int rank, int size, const std::vector<char>& payload,
                                    double timeout_s) {
  if (address.empty())
    throw Error(Error::Kind::InvalidArgument, "rendezvous is empty, expected a file path or tcp://host:port");
  if (rank < 0 || rank >= size)
    throw Error(Error::Kind::InvalidArgument,
                "rank is " + std::to_string(rank) + ", expected [0, " + std::to_string(size) + ")");
  if (size == 1) return payload;
  if (isTcp(address)) {
    if (rank == 0) {
      serve(address, size - 1, payload, timeout_s);
      return payload;
    }
    return fetch(address, payload.size(), timeout_s);
  }
  if (rank == 0) {
    writeFile(filePath(address), payload);
    return payload;
  }
  return readFile(filePath(address), payload.size(), timeout_s);
}

void removeRendezvous(const std::string& address) {
  if (!isTcp(address)) std::remove(filePath(address).c_str());
}

}  // namespace ssmjit::parallel
