// libFuzzer target: the tcp_store client's reply parsing, against a fake server that answers
// with arbitrary bytes.
//
// Input: [u8 what][reply bytes...]. `what` picks the call (set, get, add, wait) and, with bit
// 2, a token: the constructor's handshake then reads the reply bytes first. The fake server is
// a set of loopback listeners; per input the client connects, the target accepts, writes the
// reply bytes and closes its side, so every read ends (no hang). Properties: the call
// returns or raises tutti::error, nothing else; no crash or sanitizer report.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <tutti/bootstrap/tcp_store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/store/wire.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace td = tutti::detail;
using namespace std::chrono_literals;

namespace {

/// One listener on 127.0.0.1 + i for each i < count, used in turn: each connection leaves its
/// address pair in TIME_WAIT for a minute, and where net.ipv4.tcp_tw_reuse is 0 one destination
/// would run out of ephemeral ports (~28000) in well under a minute of fuzzing.
struct fake_server {
  static constexpr int count = 16;
  std::array<td::unique_fd, count> listeners;
  std::array<int, count> ports{};
  int next = 0;
  fake_server() {
    for (int i = 0; i < count; ++i) {
      auto& l = listeners[static_cast<std::size_t>(i)];
      l.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK + static_cast<std::uint32_t>(i));
      if (!l || ::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          ::listen(l.get(), 16) != 0)
        std::abort();
      ports[static_cast<std::size_t>(i)] = ntohs(td::store_local_address(l.get()).sin_port);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fake_server server;
  if (size == 0) return 0;
  const int what = data[0] & 3;
  const bool with_token = (data[0] & 4) != 0;
  const std::vector<std::byte> reply(reinterpret_cast<const std::byte*>(data) + 1,
                                     reinterpret_cast<const std::byte*>(data) + size);
  if (reply.size() > (std::size_t{64} << 10)) return 0;
  const auto slot = static_cast<std::size_t>(server.next);
  server.next = (server.next + 1) % fake_server::count;
  const int listener = server.listeners[slot].get();
  const std::string host = "127.0.0." + std::to_string(1 + slot);
  std::string failure;  // why the client gave up, for the report of a client that never came
  std::thread client([&] {
    try {
      tutti::bootstrap::tcp_store store(host, server.ports[slot], false, 2s,
                                        with_token ? "fuzz-token" : "");
      const std::string keys[] = {"a", "b"};
      switch (what) {
        case 0:
          store.set_string("a", "value");
          break;
        case 1:
          (void)store.get(keys[0], 0ms);
          break;
        case 2:
          (void)store.add("a", 1);
          break;
        default:
          store.wait(keys, 0ms);
          break;
      }
    } catch (const tutti::error& e) {  // the expected outcome of most replies
      failure = e.what();
    }
  });
  // libFuzzer's -timeout watchdog is a SIGALRM each second: poll() may return EINTR.
  pollfd p{listener, POLLIN, 0};
  int ready = 0;
  const auto deadline = td::store_deadline(5s);
  while ((ready = ::poll(&p, 1, td::store_poll_ms(deadline))) < 0 && errno == EINTR) {
  }
  if (ready != 1) {  // the client never connected
    client.join();
    std::fprintf(stderr, "fuzz_store_client: no connection to %s:%d; the client said: %s\n",
                 host.c_str(), server.ports[slot], failure.c_str());
    std::abort();
  }
  td::unique_fd peer;
  do {
    peer.reset(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  } while (!peer && errno == EINTR);
  if (!peer) std::abort();
  // The reply is small enough for the socket buffers: written before the client reads it.
  (void)td::store_send_all(peer.get(), reply, td::store_deadline(5s));  // the client may leave
  (void)::shutdown(peer.get(), SHUT_WR);
  client.join();
  return 0;
}
