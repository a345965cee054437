// tutti::distributed_sampler against torch.utils.data.DistributedSampler. Unshuffled tables are
// computed by hand from torch's definition (reference/torch_distributed.md §6); shuffled ones
// were printed by torch 2.x's DistributedSampler for the same arguments (list(sampler) per
// rank after set_epoch), so they pin tutti's permutation to torch.randperm bit for bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/adapters/sampler.hpp>

namespace {

using table = std::vector<std::vector<std::size_t>>;

table all_ranks(std::size_t n, int p, tutti::sampler_options o, std::uint64_t epoch) {
  table t;
  for (int r = 0; r < p; ++r) {
    tutti::distributed_sampler s(n, p, r, o);
    s.set_epoch(epoch);
    t.push_back(s.indices());
    CHECK(s.indices().size() == s.size());
  }
  return t;
}

}  // namespace

TEST_CASE("sampler: the issue's example") {
  tutti::distributed_sampler s(/*dataset_size=*/10, /*num_replicas=*/4, /*rank=*/1,
                               {.shuffle = false, .seed = 0, .drop_last = false});
  s.set_epoch(0);
  std::vector<std::size_t> idx = s.indices();
  CHECK(idx == std::vector<std::size_t>{1, 5, 9});
  CHECK(s.size() == 3);
  CHECK(s.total_size() == 12);
}

TEST_CASE("sampler: unshuffled, padded from the start, strided") {
  // n = 10, p = 4: num_samples = ceil(10/4) = 3, total 12, order 0..9 then 0, 1.
  const table want{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  CHECK(all_ranks(10, 4, {.shuffle = false}, 0) == want);
  tutti::distributed_sampler s(10, 4, 2, {.shuffle = false});
  CHECK(s.padding_mask() == std::vector<bool>{false, false, true});
  tutti::distributed_sampler s3(10, 4, 3, {.shuffle = false});
  CHECK(s3.padding_mask() == std::vector<bool>{false, false, true});
  tutti::distributed_sampler s0(10, 4, 0, {.shuffle = false});
  CHECK(s0.padding_mask() == std::vector<bool>{false, false, false});
}

TEST_CASE("sampler: drop_last cuts the tail") {
  // n = 10, p = 4, drop_last: num_samples = floor(10/4) = 2, order cut to 8.
  const table want{{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  CHECK(all_ranks(10, 4, {.shuffle = false, .drop_last = true}, 0) == want);
  tutti::distributed_sampler s(10, 4, 1, {.shuffle = false, .drop_last = true});
  CHECK(s.size() == 2);
  CHECK(s.total_size() == 8);
  CHECK(s.padding_mask() == std::vector<bool>{false, false});
  // Exact division: drop_last changes nothing.
  CHECK(all_ranks(8, 4, {.shuffle = false, .drop_last = true}, 0) ==
        all_ranks(8, 4, {.shuffle = false}, 0));
  // Fewer samples than replicas: nothing at all.
  tutti::distributed_sampler tiny(3, 4, 0, {.shuffle = false, .drop_last = true});
  CHECK(tiny.size() == 0);
  CHECK(tiny.indices().empty());
}

TEST_CASE("sampler: padding longer than the dataset repeats it from the start") {
  // n = 3, p = 8: num_samples 1, total 8 = 0 1 2 0 1 2 0 1.
  const table want{{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}};
  CHECK(all_ranks(3, 8, {.shuffle = false}, 0) == want);
  for (int r = 0; r < 8; ++r) {
    tutti::distributed_sampler s(3, 8, r, {.shuffle = false});
    CHECK(s.padding_mask() == std::vector<bool>{r >= 3});
  }
  // torch: seed 5, shuffled order 2 1 0, repeated.
  const table shuffled{{2}, {1}, {0}, {2}, {1}, {0}, {2}, {1}};
  CHECK(all_ranks(3, 8, {.shuffle = true, .seed = 5}, 0) == shuffled);
}

TEST_CASE("sampler: shuffled epochs equal torch's") {
  const tutti::sampler_options o{.shuffle = true, .seed = 42, .drop_last = false};
  CHECK(all_ranks(10, 3, o, 0) == table{{2, 8, 0, 7}, {6, 4, 9, 2}, {1, 5, 3, 6}});
  CHECK(all_ranks(10, 3, o, 1) == table{{8, 0, 6, 3}, {4, 5, 7, 8}, {9, 1, 2, 4}});
  CHECK(all_ranks(10, 3, o, 2) == table{{2, 8, 1, 0}, {6, 7, 4, 2}, {3, 9, 5, 6}});
  // drop_last with a shuffle, a later epoch.
  CHECK(all_ranks(11, 4, {.shuffle = true, .seed = 7, .drop_last = true}, 5) ==
        table{{10, 0}, {4, 7}, {3, 1}, {8, 6}});
  // torch seeds its generator with the low 32 bits of seed + epoch.
  CHECK(all_ranks(13, 4, {.shuffle = true, .seed = (std::uint64_t{1} << 32) + 9}, 0) ==
        table{{2, 9, 7, 0}, {5, 1, 3, 2}, {12, 4, 6, 5}, {10, 11, 8, 12}});
  CHECK(all_ranks(13, 4, {.shuffle = true, .seed = 4}, 5) ==
        all_ranks(13, 4, {.shuffle = true, .seed = 9}, 0));
}

TEST_CASE("sampler: every rank sees one epoch order; together they cover the dataset") {
  for (std::size_t n : {1U, 7U, 64U, 1000U}) {
    for (int p : {1, 2, 3, 8}) {
      for (bool drop : {false, true}) {
        const tutti::sampler_options o{.shuffle = true, .seed = 3, .drop_last = drop};
        std::vector<int> seen(n, 0);
        std::size_t real = 0;
        for (int r = 0; r < p; ++r) {
          tutti::distributed_sampler s(n, p, r, o);
          s.set_epoch(11);
          const auto idx = s.indices();
          const auto pad = s.padding_mask();
          REQUIRE(pad.size() == idx.size());
          for (std::size_t i = 0; i < idx.size(); ++i) {
            REQUIRE(idx[i] < n);
            if (!pad[i]) {
              ++seen[idx[i]];
              ++real;
            }
          }
        }
        // Without drop_last every index appears exactly once outside the padding; with it
        // at most once, and exactly total_size of them.
        const tutti::distributed_sampler s(n, p, 0, o);
        CHECK(real == (drop ? s.total_size() : n));
        for (std::size_t i = 0; i < n; ++i) CHECK(seen[i] <= 1);
        if (!drop)
          for (std::size_t i = 0; i < n; ++i) CHECK(seen[i] == 1);
      }
    }
  }
}

TEST_CASE("sampler: the permutation algorithms") {
  std::mt19937 a(3);
  // The inside-out variant torch.randperm uses from UINT32_MAX / 20 elements on (checked
  // against torch at n = 214748364; here its first steps on a small n).
  CHECK(tutti::detail::randperm_inside_out(20, a) ==
        std::vector<std::size_t>{13, 5, 17, 2,  10, 7,  6,  3, 4, 14,
                                 11, 9, 12, 19, 18, 15, 16, 1, 0, 8});
  std::mt19937 b(0);
  // torch.randperm(10) after manual_seed(0).
  const auto p = tutti::detail::torch_randperm(10, 0);
  CHECK(p == tutti::detail::randperm_fisher_yates(10, b));
  std::vector<std::size_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> iota(10);
  std::iota(iota.begin(), iota.end(), std::size_t{0});
  CHECK(sorted == iota);
  CHECK(tutti::detail::torch_randperm(0, 1).empty());
  CHECK(tutti::detail::torch_randperm(1, 1) == std::vector<std::size_t>{0});
}

TEST_CASE("sampler: invalid arguments raise") {
  CHECK_THROWS_AS(tutti::distributed_sampler(10, 0, 0), tutti::error);
  CHECK_THROWS_AS(tutti::distributed_sampler(10, 4, 4), tutti::error);
  CHECK_THROWS_AS(tutti::distributed_sampler(10, 4, -1), tutti::error);
  try {
    tutti::distributed_sampler(10, 4, 7);
    FAIL("no error");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    CHECK(std::string(e.what()).find("rank=7") != std::string::npos);
  }
  tutti::distributed_sampler empty(0, 4, 0);
  CHECK(empty.size() == 0);
  CHECK(empty.indices().empty());
}
