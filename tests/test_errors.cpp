// Mismatched calls, timeouts, failures on one rank, invalid arguments, async work and
// point-to-point: every failure raises tutti::error on every rank, promptly, never a hang and
// never wrong data.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tutti/detail/communicator_args.hpp>

#include "harness.hpp"

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

/// What each rank saw: which error kind it raised (0 = none), the message, the peer it named
/// and the call it raised in.
struct outcome {
  std::vector<int> kind;
  std::vector<std::string> what;
  std::vector<int> peer;
  std::vector<std::uint64_t> seq;
  explicit outcome(int p)
      : kind(static_cast<std::size_t>(p), 0),
        what(static_cast<std::size_t>(p)),
        peer(static_cast<std::size_t>(p), -9),
        seq(static_cast<std::size_t>(p), 0) {}
};

/// Runs `body` on p ranks with a 10 s timeout; each rank then calls barrier() (the call after
/// the mismatch). Records the first tutti::error each rank raised.
template <class P>
outcome run_recording(int p,
                      const std::function<void(tutti::communicator<tutti::inproc, P>&)>& body,
                      std::chrono::milliseconds timeout = 10s) {
  outcome o(p);
  std::mutex mu;
  try {
    tutti::inproc::run<P>(
        p,
        [&](auto& comm) {
          const auto r = static_cast<std::size_t>(comm.rank());
          try {
            body(comm);
            comm.barrier();
          } catch (const tutti::error& e) {
            std::lock_guard lock(mu);
            o.kind[r] = static_cast<int>(e.kind());
            o.what[r] = e.what();
            o.peer[r] = e.peer();
            o.seq[r] = e.sequence();
            throw;
          }
        },
        tutti::options{.timeout = timeout, .algo = ""});
  } catch (const tutti::error&) {
  }
  return o;
}

template <class P>
void expect_mismatch_everywhere(
    const char* what, int p,
    const std::function<void(tutti::communicator<tutti::inproc, P>&)>& body) {
  const auto t0 = clk::now();
  const outcome o = run_recording<P>(p, body);
  const auto took = clk::now() - t0;
  INFO(P::name, " ", what, " p=", p);
  CHECK(took < 5s);  // found by the fingerprint checks, not by the 10 s timeout
  const std::uint64_t first = *std::min_element(o.seq.begin(), o.seq.end());
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    INFO("rank ", r, ": ", o.what[i]);
    CHECK(o.kind[i] == static_cast<int>(tutti::errc::mismatch));
    CHECK(o.what[i].find("but rank") != std::string::npos);  // names both sides
    // Rank 1 deviates: in the mismatched call every other rank names it, and it names one of
    // them. (A rank that learnt of it from another's abort record once named the rank it was
    // waiting for, which may agree with it: tests/mismatch finding 4.)
    if (o.seq[i] != first) continue;  // raised at the call after it: any rank it waited for
    if (r == 1) {
      CHECK(o.peer[i] >= 0);
      CHECK(o.peer[i] < p);
      CHECK(o.peer[i] != 1);
    } else {
      CHECK(o.peer[i] == 1);
    }
  }
}

template <class P>
void mismatch_suite() {
  using comm_t = tutti::communicator<tutti::inproc, P>;
  for (int p : {2, 3, 4, 7}) {
    expect_mismatch_everywhere<P>("count", p, [](comm_t& c) {
      std::vector<float> v(c.rank() == 1 ? 1001 : 1000, 1.0f);
      c.all_reduce(std::span<float>(v), tutti::sum);
    });
    expect_mismatch_everywhere<P>("type", p, [](comm_t& c) {
      std::vector<float> f(64, 1.0f);
      std::vector<std::int32_t> i(64, 1);
      if (c.rank() == 1)
        c.all_reduce(std::span<std::int32_t>(i), tutti::sum);
      else
        c.all_reduce(std::span<float>(f), tutti::sum);
    });
    expect_mismatch_everywhere<P>("op", p, [](comm_t& c) {
      std::vector<float> v(64, 1.0f);
      if (c.rank() == 1)
        c.all_reduce(std::span<float>(v), tutti::max);
      else
        c.all_reduce(std::span<float>(v), tutti::sum);
    });
    if constexpr (tutti::detail::has_broadcast<P, tutti::inproc>) {
      expect_mismatch_everywhere<P>("root", p, [](comm_t& c) {
        std::vector<int> v(16, c.rank());
        c.broadcast(std::span<int>(v), c.rank() == 1 ? 1 : 0);
      });
      expect_mismatch_everywhere<P>("collective", p, [](comm_t& c) {
        std::vector<float> v(64, 1.0f);
        if (c.rank() == 1)
          c.broadcast(std::span<float>(v), 0);
        else
          c.all_reduce(std::span<float>(v), tutti::sum);
      });
    }
    expect_mismatch_everywhere<P>("skipped call", p, [](comm_t& c) {
      std::vector<float> v(64, 1.0f);
      if (c.rank() != 1) c.all_reduce(std::span<float>(v), tutti::sum);
      std::vector<std::int64_t> w(8, 1);
      c.all_reduce(std::span<std::int64_t>(w), tutti::max);
    });
  }
}

}  // namespace

TEST_CASE("mismatched calls raise on every rank: ring") { mismatch_suite<tutti::ring>(); }
TEST_CASE("mismatched calls raise on every rank: tree") { mismatch_suite<tutti::tree>(); }
TEST_CASE("mismatched calls raise on every rank: recursive_halving") {
  mismatch_suite<tutti::recursive_halving>();
}
TEST_CASE("mismatched calls raise on every rank: recursive_doubling") {
  mismatch_suite<tutti::recursive_doubling>();
}
TEST_CASE("mismatched calls raise on every rank: direct") { mismatch_suite<tutti::direct>(); }
TEST_CASE("mismatched calls raise on every rank: automatic") { mismatch_suite<tutti::automatic>(); }

TEST_CASE("a rank that returns without the last call is named at once, not at the timeout") {
  std::vector<int> kinds(3, 0);
  std::vector<int> peers(3, -2);
  std::mutex mu;
  const auto start = clk::now();
  CHECK_THROWS_AS(tutti::inproc::run<tutti::ring>(
                      3,
                      [&](auto& c) {
                        if (c.rank() == 2) return;  // skips the all_reduce
                        std::vector<float> v(10, 1.0f);
                        try {
                          c.all_reduce(std::span<float>(v), tutti::sum);
                        } catch (const tutti::error& e) {
                          std::lock_guard lock(mu);
                          kinds[static_cast<std::size_t>(c.rank())] = static_cast<int>(e.kind());
                          peers[static_cast<std::size_t>(c.rank())] = e.peer();
                          throw;
                        }
                      },
                      tutti::options{.timeout = 60s, .algo = ""}),
                  tutti::error);
  CHECK(clk::now() - start < 5s);
  // The rank waiting on rank 2 names it; the other is released by the abort that caused.
  int named = 0;
  for (int r = 0; r < 2; ++r) {
    const auto k = static_cast<tutti::errc>(kinds[static_cast<std::size_t>(r)]);
    CHECK((k == tutti::errc::peer_lost || k == tutti::errc::aborted));
    if (k == tutti::errc::peer_lost) {
      ++named;
      CHECK(peers[static_cast<std::size_t>(r)] == 2);
    }
  }
  CHECK(named >= 1);
}

TEST_CASE("a rank that is alive but silent makes its peer time out, naming it") {
  const auto start = clk::now();
  try {
    tutti::inproc::run<tutti::ring>(
        2,
        [](auto& c) {
          std::vector<int> v(1);
          if (c.rank() == 1) {
            std::this_thread::sleep_for(1s);  // busy elsewhere: never sends
            return;
          }
          c.recv(std::span<int>(v), 1);
        },
        tutti::options{.timeout = 200ms, .algo = ""});
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::timeout);
    CHECK(e.peer() == 1);
    CHECK(e.rank() == 0);
  }
  const auto took = clk::now() - start;
  CHECK(took >= 200ms);
  CHECK(took < 5s);
}

TEST_CASE("an exception on one rank propagates out of run and releases the others") {
  const auto start = clk::now();
  std::atomic<int> released{0};
  try {
    tutti::inproc::run<tutti::tree>(
        4,
        [&](auto& c) {
          if (c.rank() == 2) throw std::runtime_error("boom on rank 2");
          std::vector<double> v(100, 1.0);
          try {
            c.all_reduce(std::span<double>(v), tutti::sum);
          } catch (const tutti::error& e) {
            if (e.kind() == tutti::errc::aborted) released.fetch_add(1);
            throw;
          }
        },
        tutti::options{.timeout = 30s, .algo = ""});
    FAIL("run did not throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string{e.what()} == "boom on rank 2");
  }
  CHECK(released.load() == 3);
  CHECK(clk::now() - start < 5s);
}

TEST_CASE("after an error the communicator raises at once") {
  std::atomic<int> second{0};
  CHECK_NOTHROW(tutti::inproc::run<tutti::ring>(
      2,
      [&](auto& c) {
        std::vector<float> v(c.rank() == 0 ? 4 : 5, 1.0f);
        try {
          c.all_reduce(std::span<float>(v), tutti::sum);
        } catch (const tutti::error&) {
        }
        try {
          c.barrier();
        } catch (const tutti::error& e) {
          if (e.kind() == tutti::errc::aborted || e.kind() == tutti::errc::mismatch) second++;
        }
      },
      tutti::options{.timeout = 10s, .algo = ""}));
  CHECK(second.load() == 2);
}

TEST_CASE("invalid arguments are rejected before anything is sent") {
  auto expect_invalid = [](auto&& body) {
    try {
      tutti::inproc::run<tutti::automatic>(3, body, tutti::options{.timeout = 10s, .algo = ""});
      FAIL("no error");
    } catch (const tutti::error& e) {
      CHECK(e.kind() == tutti::errc::invalid_argument);
    }
  };
  expect_invalid([](auto& c) {
    std::vector<int> v(4);
    c.broadcast(std::span<int>(v), 3);  // root out of range
  });
  expect_invalid([](auto& c) {
    std::vector<int> in(4), out(5);
    c.all_reduce(std::span<const int>(in), std::span<int>(out), tutti::sum);
  });
  expect_invalid([](auto& c) {
    std::vector<int> in(4), out(11);
    c.all_gather(std::span<const int>(in), std::span<int>(out));
  });
  expect_invalid([](auto& c) {
    std::vector<int> in(7), out(2);
    c.reduce_scatter(std::span<const int>(in), std::span<int>(out), tutti::sum);
  });
  expect_invalid([](auto& c) {
    std::vector<int> in(3), out(3);
    std::vector<std::size_t> counts{1, 1};  // one entry short
    c.all_gatherv(std::span<const int>(in), std::span<int>(out),
                  std::span<const std::size_t>(counts));
  });
  expect_invalid([](auto& c) {
    std::vector<int> v(1);
    c.send(std::span<const int>(v), c.rank());  // to itself
  });
}

// Every check a collective makes on its arguments, with the message it raises: the collective,
// the number the call would have had, this rank, and the sizes involved.
namespace {

using tutti::detail::call_args;
using tutti::detail::collective;

/// The message of the error `check` raises on rank 1 of 4, where the next call is #7.
template <class Check>
std::string argument_error(collective k, Check&& check) {
  try {
    check(call_args(k, 7, 1, 4));
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    CHECK(e.sequence() == 7);
    CHECK(e.rank() == 1);
    CHECK(e.peer() == -1);
    return e.what();
  }
  return "no error";
}

/// The message a check on rank 1 raises in call #7 of `coll`, for `why`.
std::string raised(std::string_view coll, const std::string& why) {
  return "tutti: " + std::string(coll) + " #7 on rank 1: " + why + ": " +
         tutti::make_error_code(tutti::errc::invalid_argument).message();
}

/// Buffers for the argument checks: one element each (only their addresses are looked at), and
/// counts for 4 ranks and one entry short.
struct argument_buffers {
  using bytes = std::byte*;
  std::byte in[1], out[1];
  const bytes i = in, o = out;
  const std::size_t counts[4] = {1, 2, 3, 4};
  const std::span<const std::size_t> all{counts}, short_counts{counts, 3};
};

}  // namespace

TEST_CASE_FIXTURE(argument_buffers, "each argument check says what is wrong: reducing ones") {
  CHECK(argument_error(collective::all_reduce, [&](const call_args& a) {
          (void)a.reducing(i, 5, o, 4, -1);
        }) == raised("all_reduce", "buffer has 4 elements, needs 5"));
  CHECK(argument_error(collective::reduce, [&](const call_args& a) {
          (void)a.reducing(i, 5, o, 5, 4);
        }) == raised("reduce", "root 4 is not a rank in [0, 4)"));
  CHECK(argument_error(collective::reduce, [&](const call_args& a) {
          (void)a.reducing(i, 5, o, 6, 1);
        }) == raised("reduce", "buffer has 6 elements, needs 5"));
  CHECK(argument_error(collective::reduce_scatter, [&](const call_args& a) {
          (void)a.reducing(i, 7, o, 2, -1);
        }) == raised("reduce_scatter", "buffer has 7 elements, needs 8"));
}

TEST_CASE_FIXTURE(argument_buffers, "each argument check says what is wrong: moving ones") {
  CHECK(argument_error(collective::broadcast, [&](const call_args& a) {
          (void)a.moving(o, 3, o, 3, -1);
        }) == raised("broadcast", "root -1 is not a rank in [0, 4)"));
  CHECK(argument_error(collective::all_gather, [&](const call_args& a) {
          (void)a.moving(i, 3, o, 11, -1);
        }) == raised("all_gather", "buffer has 11 elements, needs 12"));
  CHECK(argument_error(collective::gather, [&](const call_args& a) {
          (void)a.moving(i, 3, o, 9, 1);
        }) == raised("gather", "buffer has 9 elements, needs 12"));
  CHECK(argument_error(collective::scatter, [&](const call_args& a) {
          (void)a.moving(i, 9, o, 3, 1);
        }) == raised("scatter", "buffer has 9 elements, needs 12"));
  // Both sizes wrong: the input's blocks are named first.
  CHECK(argument_error(collective::all_to_all, [&](const call_args& a) {
          (void)a.moving(i, 6, o, 8, -1);
        }) == raised("all_to_all", "buffer of 6 elements is not a multiple of 4 ranks"));
  CHECK(argument_error(collective::all_to_all, [&](const call_args& a) {
          (void)a.moving(i, 8, o, 4, -1);
        }) == raised("all_to_all", "buffer has 4 elements, needs 8"));
  CHECK(argument_error(collective::all_gather, [&](const call_args& a) { (void)a.block(10); }) ==
        raised("all_gather", "buffer of 10 elements is not a multiple of 4 ranks"));
}

TEST_CASE_FIXTURE(argument_buffers, "each argument check says what is wrong: vectored ones") {
  CHECK(argument_error(collective::all_gatherv, [&](const call_args& a) {
          (void)a.vectored(i, 2, o, 10, short_counts, -1);
        }) == raised("all_gatherv", "counts has 3 entries for 4 ranks"));
  CHECK(argument_error(collective::all_gatherv, [&](const call_args& a) {
          (void)a.vectored(i, 1, o, 10, all, -1);
        }) == raised("all_gatherv", "buffer has 1 elements, needs 2"));
  CHECK(argument_error(collective::gatherv, [&](const call_args& a) {
          (void)a.vectored(i, 2, o, 9, all, 1);
        }) == raised("gatherv", "buffer has 9 elements, needs 10"));
  CHECK(argument_error(collective::scatterv, [&](const call_args& a) {
          (void)a.vectored(i, 10, o, 3, all, 0);
        }) == raised("scatterv", "buffer has 3 elements, needs 2"));
  CHECK(argument_error(collective::scatterv, [&](const call_args& a) {
          (void)a.vectored(i, 10, o, 2, all, 4);
        }) == raised("scatterv", "root 4 is not a rank in [0, 4)"));
  CHECK(argument_error(collective::all_to_allv, [&](const call_args& a) {
          a.all_to_allv(10, short_counts, 10, all);
        }) == raised("all_to_allv", "send_counts and recv_counts need one entry per rank"));
  CHECK(argument_error(collective::all_to_allv, [&](const call_args& a) {
          a.all_to_allv(10, all, 9, all);
        }) == raised("all_to_allv", "buffer has 9 elements, needs 10"));
}

TEST_CASE_FIXTURE(argument_buffers,
                  "what passes the argument checks: the policy's count and buffers") {
  // What passes, and what the policy is handed: a rank's count and its buffers, null where
  // this rank has none (not the root).
  const call_args a(collective::gather, 7, 1, 4);
  const auto g = a.moving(i, 3, o, 1, 0);  // not the root: its output is not looked at
  CHECK((g.in == i && g.out == nullptr && g.n == 3));
  const auto s = call_args(collective::scatter, 7, 1, 4).moving(i, 12, o, 3, 1);  // the root
  CHECK((s.in == i && s.out == o && s.n == 3));
  const auto t = call_args(collective::all_to_all, 7, 1, 4).moving(i, 8, o, 8, -1);
  CHECK((t.in == i && t.out == o && t.n == 2));
  const auto r = call_args(collective::reduce, 7, 1, 4).reducing(i, 5, o, 0, 0);
  CHECK((r.in == i && r.out == nullptr && r.n == 5));
  const auto v = call_args(collective::scatterv, 7, 1, 4).vectored(i, 0, o, 2, all, 0);
  CHECK((v.in == nullptr && v.out == o));
  const auto w = call_args(collective::gatherv, 7, 1, 4).vectored(i, 2, o, 0, all, 0);
  CHECK((w.in == i && w.out == nullptr));
}

// Through a communicator: the error names the number the refused call would have had, and the
// refusal leaves the communicator usable.
TEST_CASE("a refused call names the number it would have had") {
  std::vector<std::string> what(2);
  std::vector<int> after(2);
  tutti::inproc::run<tutti::ring>(2, [&](auto& c) {
    std::vector<int> v(4, 1), out(3);
    c.all_reduce(std::span<int>(v), tutti::sum);
    c.barrier();
    try {
      c.all_reduce(std::span<const int>(v), std::span<int>(out), tutti::sum);
    } catch (const tutti::error& e) {
      what[static_cast<std::size_t>(c.rank())] = e.what();
    }
    c.all_reduce(std::span<int>(v), tutti::sum);
    after[static_cast<std::size_t>(c.rank())] = v[3];
  });
  const std::string tail = ": buffer has 3 elements, needs 4: " +
                           tutti::make_error_code(tutti::errc::invalid_argument).message();
  CHECK(what[0] == "tutti: all_reduce #3 on rank 0" + tail);
  CHECK(what[1] == "tutti: all_reduce #3 on rank 1" + tail);
  CHECK(after == std::vector<int>{4, 4});
}

TEST_CASE("async collectives run in issue order and rethrow at wait") {
  tutti::inproc::run<tutti::automatic>(4, [](auto& c) {
    const int p = c.size();
    std::vector<std::vector<float>> bufs;
    bufs.reserve(6);
    for (int k = 0; k < 6; ++k)
      bufs.emplace_back(1000 + static_cast<std::size_t>(k), float(c.rank() + k));
    std::vector<tutti::work> w;
    w.reserve(bufs.size());
    for (auto& b : bufs) w.push_back(c.all_reduce_async(std::span<float>(b), tutti::sum));
    std::vector<int> bc(3, c.rank() == 0 ? 42 : 0);
    c.broadcast(std::span<int>(bc), 0);  // blocking, after the queued ones
    for (auto& x : w) CHECK(x.done());
    for (int k = 0; k < 6; ++k) {
      w[static_cast<std::size_t>(k)].wait();
      const int exact = p * (p - 1) / 2 + p * k;  // 0 + 1 + ... + (p-1) + p*k
      const auto want = static_cast<float>(exact);
      for (float x : bufs[static_cast<std::size_t>(k)]) REQUIRE(x == want);
    }
    CHECK(bc[2] == 42);
    auto b = c.barrier_async();
    CHECK(b.wait_for(10s));
  });

  // An async mismatch surfaces from wait() on every rank.
  std::atomic<int> raised{0};
  CHECK_THROWS(tutti::inproc::run<tutti::ring>(
      3,
      [&](auto& c) {
        std::vector<float> v(c.rank() == 0 ? 8 : 9, 1.0f);
        auto w = c.all_reduce_async(std::span<float>(v), tutti::sum);
        try {
          w.wait();
        } catch (const tutti::error&) {
          raised++;
          throw;
        }
      },
      tutti::options{.timeout = 10s, .algo = ""}));
  CHECK(raised.load() == 3);
}

TEST_CASE("send/recv after a collective: a slow peer is not a mismatch") {
  // A receive waiting long enough to poll carries the last collective's number; it must not be
  // compared with the peer's board entry for that collective (a bug the examples hit under ASan).
  tutti::inproc::run<tutti::ring>(2, [](auto& c) {
    std::vector<int> msg{c.rank() == 1 ? 21 : 0};
    c.barrier();
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      c.send(std::span<const int>(msg), 0);
    } else {
      c.recv(std::span<int>(msg), 1);
      CHECK(msg[0] == 21);
    }
  });
}

TEST_CASE("send and recv match by tag in order, and check sizes") {
  tutti::inproc::run<tutti::ring>(4, [](auto& c) {
    const int p = c.size(), r = c.rank();
    const int to = (r + 1) % p, from = (r + p - 1) % p;
    std::vector<std::int64_t> out(5), in(5);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < 5; ++i)
        out[i] = r * 100 + round * 10 + static_cast<std::int64_t>(i);
      if (r % 2 == 0) {
        c.send(std::span<const std::int64_t>(out), to, 7);
        c.recv(std::span<std::int64_t>(in), from, 7);
      } else {
        c.recv(std::span<std::int64_t>(in), from, 7);
        c.send(std::span<const std::int64_t>(out), to, 7);
      }
      for (std::size_t i = 0; i < 5; ++i)
        REQUIRE(in[i] == from * 100 + round * 10 + static_cast<std::int64_t>(i));
    }
  });
  try {
    tutti::inproc::run<tutti::ring>(2, [](auto& c) {
      std::vector<int> v(c.rank() == 0 ? 3 : 4);
      if (c.rank() == 0)
        c.send(std::span<const int>(v), 1);
      else
        c.recv(std::span<int>(v), 0);
    });
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(std::string{e.what()}.find("size mismatch") != std::string::npos);
  }
}

TEST_CASE("TUTTI_TIMEOUT sets the default deadline") {
  setenv("TUTTI_TIMEOUT", "0.2", 1);
  const tutti::options o;
  unsetenv("TUTTI_TIMEOUT");
  CHECK(o.timeout == std::chrono::milliseconds(200));
  const auto start = clk::now();
  try {
    tutti::inproc::run<tutti::tree>(
        2,
        [&](auto& c) {
          std::vector<int> v(1);
          if (c.rank() == 0)
            c.recv(std::span<int>(v), 1, 3);
          else
            std::this_thread::sleep_for(1s);  // alive, never sends
        },
        o);
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::timeout);
    CHECK(e.peer() == 1);
    CHECK(e.collective() == "recv");
  }
  CHECK(clk::now() - start < 5s);
}
