// libFuzzer target: the tcp_store server's request handling (store_engine), fed arbitrary bytes
// as the streams of three clients, with and without a token.
//
// Input: [u8 flags][chunk]...; flags bit 0: the server has a token; bit 1: client 0 first
// completes the handshake properly (so its later bytes reach the key-value requests).
// A chunk is [u8 client][u8 length][length bytes], appended to that client's stream as far as
// the server would read it. After every chunk the engine handles what is buffered, replies
// are "sent" (checked: whole frames of legal length) and closed clients are replaced.
// Properties: no crash or sanitizer report; no connection ever buffers more than in_cap();
// an unauthenticated connection never reaches the map (the key count stays 0).

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include <tutti/detail/store/engine.hpp>
#include <tutti/detail/store/wire.hpp>

#include "fuzz_check.hpp"

namespace td = tutti::detail;

using fuzz::check;

namespace {

/// Every reply is a whole frame of legal length.
void check_replies(const std::vector<std::byte>& out) {
  std::size_t pos = 0;
  while (pos < out.size()) {
    check(out.size() - pos >= 4);
    const std::uint64_t len = td::store_load_le(out.data() + pos, 4);
    check(len >= 1 && len <= td::store_max_frame + 16 && out.size() - pos - 4 >= len);
    pos += 4 + len;
  }
}

/// "Sends" every reply; a closing connection is then closed.
void drain(td::store_engine& e) {
  for (td::store_connection* c : e.take_replied()) (void)c;
  for (const auto& c : e.connections()) {
    check(c->in.size() <= td::store_engine::in_cap(*c));
    check_replies(c->out);
    c->out.clear();
    c->sent = 0;
    if (c->closing) c->dead = true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool with_token = (data[0] & 1) != 0;
  const bool authenticate_first = (data[0] & 2) != 0;
  std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  constexpr const char* token = "fuzz-token";
  td::store_engine e(with_token ? token : "");
  std::array<td::store_connection*, 3> clients{};
  for (auto& c : clients) c = &e.add(td::unique_fd{});

  if (with_token && authenticate_first) {
    td::store_connection& c = *clients[0];
    const td::store_nonce mine{};
    c.in = td::store_frame().u8(5).raw(mine).finish();
    e.step(td::store_clock::now());
    check(c.out.size() == 4 + 1 + 2 * td::store_nonce_bytes);
    const auto theirs = std::span<const std::byte>(c.out).subspan(5, td::store_nonce_bytes);
    c.in = td::store_frame().u8(6).raw(td::store_auth_proof(token, false, mine, theirs)).finish();
    c.out.clear();
    e.step(td::store_clock::now());
    check(c.authenticated && !c.closing && !c.dead);
    drain(e);
  }

  bool ever_authenticated = false;
  while (rest.size() >= 2) {
    const std::size_t who = std::to_integer<std::size_t>(rest[0]) % clients.size();
    const std::size_t len = std::min(std::to_integer<std::size_t>(rest[1]), rest.size() - 2);
    const auto bytes = rest.subspan(2, len);
    rest = rest.subspan(2 + len);
    td::store_connection& c = *clients[who];
    if (!c.closing && !c.dead) {
      const std::size_t room = td::store_engine::in_cap(c) - c.in.size();
      const auto taken = bytes.first(std::min(room, bytes.size()));
      c.in.insert(c.in.end(), taken.begin(), taken.end());
    }
    e.step(td::store_clock::now());
    for (const auto* k : clients) ever_authenticated = ever_authenticated || k->authenticated;
    check(ever_authenticated || e.size() == 0);
    drain(e);
    std::array<bool, clients.size()> replace{};
    for (std::size_t i = 0; i < clients.size(); ++i) replace[i] = clients[i]->dead;
    e.sweep();
    for (std::size_t i = 0; i < clients.size(); ++i)
      if (replace[i]) clients[i] = &e.add(td::unique_fd{});
  }
  // Every parked get and wait times out.
  e.step(td::store_clock::time_point::max());
  drain(e);
  for (const auto& c : e.connections()) check(!c->parked);
  return 0;
}
