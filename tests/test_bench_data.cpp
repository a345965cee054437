// tutti-bench's command line, buffer shapes and result check (bench/tb/): the check must pass a
// correct collective and count every wrong element of a broken one. A reference collective,
// computed here in exact integer arithmetic from the inputs the benchmark writes, stands in
// for the library: the check is tested against it, for every collective, op, type and several
// world sizes, out of place and in place.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/core/bfloat16.hpp>
#include <tutti/core/half.hpp>

#include "../bench/tb/cli.hpp"
#include "../bench/tb/data.hpp"

namespace tb = tutti_bench;

namespace {

template <class T>
std::uint64_t as_int(const T& v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<std::uint64_t>(v);
  else
    return static_cast<std::uint64_t>(static_cast<double>(v));
}

std::uint64_t fold(tb::redop op, const std::vector<std::uint64_t>& xs) {
  std::uint64_t r = op == tb::redop::prod ? 1 : (op == tb::redop::min ? UINT64_MAX : 0);
  for (const auto x : xs) {
    switch (op) {
      case tb::redop::prod:
        r *= x;
        break;
      case tb::redop::min:
        r = std::min(r, x);
        break;
      case tb::redop::max:
        r = std::max(r, x);
        break;
      default:
        r += x;
    }
  }
  if (op == tb::redop::avg) r /= xs.size();
  return r;
}

// What a correct collective leaves in rank r's output (out of place) or buffer (in place).
template <class T>
std::vector<std::vector<T>> reference(tb::collective c, tb::redop op, int n, int root,
                                      const tb::shape& s, tb::placement p,
                                      const std::vector<std::vector<T>>& in) {
  const auto un = static_cast<std::size_t>(n);
  const bool ip = p == tb::placement::in_place;
  const std::size_t out_len = ip ? s.buf_elems : s.out_elems;
  std::vector<std::vector<T>> out(un, std::vector<T>(out_len, T{}));
  auto reduced = [&](std::size_t i) {
    std::vector<std::uint64_t> xs;
    for (std::size_t q = 0; q < un; ++q) xs.push_back(as_int(in[q][i]));
    return tb::make_value<T>(fold(op, xs));
  };
  for (std::size_t r = 0; r < un; ++r) {
    auto& o = out[r];
    if (ip) o = in[r];  // the in-place buffer starts as the input
    switch (c) {
      case tb::collective::all_reduce:
        for (std::size_t i = 0; i < s.count; ++i) o[i] = reduced(i);
        break;
      case tb::collective::reduce:
        if (static_cast<int>(r) == root)
          for (std::size_t i = 0; i < s.count; ++i) o[i] = reduced(i);
        break;
      case tb::collective::reduce_scatter:
        for (std::size_t i = 0; i < s.count; ++i)
          o[(ip ? r * s.count : 0) + i] = reduced(r * s.count + i);
        break;
      case tb::collective::broadcast:
        o = in[static_cast<std::size_t>(root)];
        break;
      case tb::collective::all_gather:
      case tb::collective::gather:
        if (c == tb::collective::gather && static_cast<int>(r) != root) break;
        for (std::size_t j = 0; j < un; ++j)
          for (std::size_t i = 0; i < s.count; ++i)
            o[j * s.count + i] = in[j][(ip ? j * s.count : 0) + i];
        break;
      case tb::collective::scatter:
        for (std::size_t i = 0; i < s.count; ++i)
          o[i] = in[static_cast<std::size_t>(root)][r * s.count + i];
        break;
      case tb::collective::all_to_all:
        for (std::size_t j = 0; j < un; ++j)
          for (std::size_t i = 0; i < s.count; ++i) o[j * s.count + i] = in[j][r * s.count + i];
        break;
    }
  }
  return out;
}

template <class T>
void check_collective(tb::collective c, tb::redop op, int n, int root, std::size_t size) {
  const auto un = static_cast<std::size_t>(n);
  const tb::shape s = tb::shape_of(c, size, sizeof(T), n);
  const auto plan = tb::value_plan::make<T>(op, n, "T");
  for (const auto p : {tb::placement::out_of_place, tb::placement::in_place}) {
    if (p == tb::placement::in_place &&
        (c == tb::collective::gather || c == tb::collective::scatter))
      continue;
    std::vector<std::vector<T>> in(un);
    for (std::size_t r = 0; r < un; ++r) {
      const tb::dataset<T> d(c, op, static_cast<int>(r), n, root, plan);
      if (p == tb::placement::in_place) {
        in[r].assign(s.buf_elems, T{});
        d.fill_in_place(in[r].data(), s);
      } else {
        in[r].assign(s.in_elems, T{});
        d.fill_input(in[r].data(), s);
      }
    }
    auto out = reference(c, op, n, root, s, p, in);
    for (std::size_t r = 0; r < un; ++r) {
      const tb::dataset<T> d(c, op, static_cast<int>(r), n, root, plan);
      INFO(tb::name_of(c), " ", tb::name_of(op), " n=", n, " rank ", r, " ", tb::name_of(p));
      CHECK(d.count_wrong(out[r].data(), s, p) == 0);
      // A rank that holds a result: one wrong element is one #wrong; a rank that holds none
      // (non-roots of reduce/gather) is not checked.
      const bool holds = !((c == tb::collective::reduce || c == tb::collective::gather) &&
                           static_cast<int>(r) != root);
      if (holds && s.count > 0) {
        const std::size_t at = c == tb::collective::reduce_scatter && p == tb::placement::in_place
                                   ? r * s.count + s.count - 1
                                   : s.count - 1;
        out[r][at] = T{};
        CHECK(d.count_wrong(out[r].data(), s, p) == 1);
      }
    }
    // Blocks from the wrong rank: rank 0 receives rank 1's all_gather block twice.
    if (c == tb::collective::all_gather && n >= 2 && s.count > 0) {
      auto bad = reference(c, op, n, root, s, p, in);
      for (std::size_t i = 0; i < s.count; ++i) bad[0][i] = bad[0][s.count + i];
      const tb::dataset<T> d(c, op, 0, n, root, plan);
      CHECK(d.count_wrong(bad[0].data(), s, p) > 0);
    }
  }
}

template <class T>
void check_all(int n) {
  for (const auto c : tb::all_collectives) {
    const int root = tb::rooted(c) ? n - 1 : 0;
    if (tb::reduces(c)) {
      for (const auto op : tb::all_redops) check_collective<T>(c, op, n, root, 4096);
    } else {
      check_collective<T>(c, tb::redop::none, n, root, 4096);
    }
  }
}

}  // namespace

TEST_CASE("bench check: a correct collective has no #wrong, each broken element counts") {
  for (const int n : {1, 2, 3, 4, 7}) {
    check_all<float>(n);
    check_all<double>(n);
    check_all<std::int8_t>(n);
    check_all<std::uint8_t>(n);
    check_all<std::int32_t>(n);
    check_all<std::uint64_t>(n);
    check_all<tutti::half>(n);
    check_all<tutti::bfloat16>(n);
  }
  // Past the table of small values a dataset converts once (sums over 40 ranks reach 2,000,
  // products 2^24).
  check_all<float>(40);
  check_all<std::int64_t>(40);
}

TEST_CASE("bench check: values stay exact, or the plan refuses") {
  // bfloat16 holds integers up to 256: a sum over 32 ranks (>= 496) cannot be checked exactly.
  CHECK_THROWS_AS((void)tb::value_plan::make<tutti::bfloat16>(tb::redop::sum, 32, "bfloat16"),
                  std::invalid_argument);
  // 8 ranks: n(1 + H) + 28 <= 256 -> H = 27.
  CHECK(tb::value_plan::make<tutti::bfloat16>(tb::redop::sum, 8, "bfloat16").h_mod == 28);
  CHECK(tb::value_plan::make<float>(tb::redop::sum, 8, "float").h_mod == 32);
  // int8: products of at most 6 twos (64 <= 127).
  CHECK(tb::value_plan::make<std::int8_t>(tb::redop::prod, 8, "int8").k_mod == 7);
  CHECK(tb::value_plan::make<std::int8_t>(tb::redop::prod, 3, "int8").k_mod == 4);
  // Moving collectives: 1 + (... mod M) with M = min(251, limit).
  CHECK(tb::value_plan::make<std::int8_t>(tb::redop::none, 4, "int8").m == 127);
  CHECK(tb::value_plan::make<float>(tb::redop::none, 4, "float").m == 251);
}

TEST_CASE("bench shapes follow nccl-tests' counts and bus factors") {
  // all_reduce at 4 ranks: busbw = algbw * 2(n-1)/n.
  auto s = tb::shape_of(tb::collective::all_reduce, 1024, 4, 4);
  CHECK(s.count == 256);
  CHECK(s.bytes == 1024);
  CHECK(s.bus_factor == doctest::Approx(1.5));
  // all_gather: per-rank count = size / n aligned to 16 bytes; size column = count * n * elem.
  s = tb::shape_of(tb::collective::all_gather, 1000, 4, 3);  // 250 floats / 3 = 83 -> 80
  CHECK(s.count == 80);
  CHECK(s.in_elems == 80);
  CHECK(s.out_elems == 240);
  CHECK(s.bytes == 960);
  CHECK(s.bus_factor == doctest::Approx(2.0 / 3.0));
  s = tb::shape_of(tb::collective::reduce_scatter, 4096, 8, 4);
  CHECK(s.count == 128);
  CHECK(s.in_elems == 512);
  CHECK(s.out_elems == 128);
  s = tb::shape_of(tb::collective::broadcast, 64, 1, 5);
  CHECK(s.count == 64);
  CHECK(s.bus_factor == 1.0);
  s = tb::shape_of(tb::collective::all_to_all, 64, 4, 2);
  CHECK(s.count == 8);
  CHECK(s.in_elems == 16);
  CHECK(s.bus_factor == doctest::Approx(0.5));
}

namespace {
tb::parse_result parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) argv.push_back(a.data());
  static constexpr std::array<std::string_view, 2> transports{"shm", "inproc"};
  static constexpr std::array<std::string_view, 2> algos{"automatic", "ring"};
  return tb::parse(static_cast<int>(argv.size()), argv.data(),
                   {.name = "tutti-bench",
                    .spawns_ranks = true,
                    .transports = transports,
                    .algos = algos,
                    .compares = true});
}
}  // namespace

TEST_CASE("bench command line: nccl-tests' flags") {
  auto r = parse({"tutti-bench", "all_reduce", "-b", "8", "-e", "64M", "-f", "4", "--np", "4", "-c",
                  "1", "-d", "half,float", "-o", "all"});
  REQUIRE(r.what == tb::parse_result::status::run);
  CHECK(r.opts.coll == tb::collective::all_reduce);
  CHECK(r.opts.min_bytes == 8);
  CHECK(r.opts.max_bytes == std::size_t{64} << 20);
  CHECK(r.opts.np == 4);
  CHECK(r.opts.types.size() == 2);
  CHECK(r.opts.ops.size() == 5);
  const auto sizes = tb::sizes_of(r.opts);
  CHECK(sizes.front() == 8);
  CHECK(sizes.back() == std::size_t{32} << 20);  // 8 * 4^11 = 32M; 128M would pass 64M
  CHECK(sizes.size() == 12);

  r = parse({"tutti-bench", "allgather_perf", "-b", "1K", "-e", "4K", "-i", "1K", "-r", "all"});
  REQUIRE(r.what == tb::parse_result::status::run);
  CHECK(r.opts.coll == tb::collective::all_gather);
  CHECK(tb::sizes_of(r.opts) == std::vector<std::size_t>{1024, 2048, 3072, 4096});
  CHECK(r.opts.ops == std::vector<tb::redop>{tb::redop::none});

  r = parse({"tutti-bench", "broadcast", "-r", "all"});
  CHECK(r.opts.all_roots);

  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"tutti-bench"},
                                             {"tutti-bench", "all_reduce", "-b", "1M", "-e", "1K"},
                                             {"tutti-bench", "all_reduce", "-f", "1"},
                                             {"tutti-bench", "all_reduce", "-f", "2", "-i", "8"},
                                             {"tutti-bench", "all_reduce", "-d", "float8"},
                                             {"tutti-bench", "all_reduce", "-o", "xor"},
                                             {"tutti-bench", "all_reduce", "--transport", "nccl"},
                                             {"tutti-bench", "all_reduce", "--algo", "magic"},
                                             {"tutti-bench", "all_reduce", "--compare", "nccl"},
                                             {"tutti-bench", "all_reduce", "-b", "12Q"},
                                             {"tutti-bench", "all_reduce", "broadcast"},
                                             {"tutti-bench", "sendrecv"}}) {
    INFO(bad.back());
    CHECK(parse(bad).what == tb::parse_result::status::error);
  }
}
