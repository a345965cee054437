// libFuzzer target: the tcp_store client's reply parsing, against a fake server that answers
// with arbitrary bytes.
//
// Input: [u8 what][reply bytes...]. `what` picks the call (set, get, add, wait) and, with bit
// 2, a token: the constructor's handshake then reads the reply bytes first. The fake server is
// a listening socket on 127.0.0.1; per input the client connects, the target accepts, writes
// the reply bytes and closes its side, so every read ends (no hang). Properties: the call
// returns or raises tutti::error, nothing else; no crash or sanitizer report.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <tutti/bootstrap/tcp_store.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/store_wire.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace td = tutti::detail;
using namespace std::chrono_literals;

namespace {

struct fake_server {
  td::unique_fd listener;
  int port = 0;
  fake_server() {
    listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!listener || ::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener.get(), 16) != 0)
      std::abort();
    port = ntohs(td::store_local_address(listener.get()).sin_port);
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
  std::thread client([&] {
    try {
      tutti::bootstrap::tcp_store store("127.0.0.1", server.port, false, 2s,
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
    } catch (const tutti::error&) {  // the expected outcome of most replies
    }
  });
  pollfd p{server.listener.get(), POLLIN, 0};
  if (::poll(&p, 1, 5000) != 1) std::abort();  // the client never connected
  const td::unique_fd peer(::accept4(server.listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!peer) std::abort();
  // The reply is small enough for the socket buffers: written before the client reads it.
  (void)td::store_send_all(peer.get(), reply, td::store_deadline(5s));  // the client may leave
  (void)::shutdown(peer.get(), SHUT_WR);
  client.join();
  return 0;
}
