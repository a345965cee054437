#pragma once
/// \file
/// tutti::mesh: a communicator's ranks arranged in an n-dimensional grid (data × tensor ×
/// pipeline parallel, as torch's DeviceMesh), with the sub-communicator along each dimension
/// and this rank's coordinates.
///
///   auto world = tutti::communicator<tutti::shm>::from_env();      // 4 ranks
///   tutti::mesh m(world, {2, 2}, {"dp", "tp"});
///   m["tp"].all_reduce(partial, tutti::sum);   // the 2 ranks sharing this rank's dp coordinate
///   m["dp"].all_reduce(grads, tutti::avg);     // the 2 ranks sharing this rank's tp coordinate

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/communicator.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/split.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

template <class Comm>
class mesh {
 public:
  /// Arranges `world`'s ranks in a grid of `shape`, row-major (the last dimension varies
  /// fastest: world rank 1 is at (0, ..., 0, 1)), its dimensions named `names` (default "0",
  /// "1", ...). Collective over `world`: it checks that every rank passed the same shape, then
  /// splits once per dimension, in order; the communicator along dimension d holds the ranks
  /// whose coordinates differ only in d, ranked by their coordinate d. `world` must outlive
  /// the mesh. Raises tutti::error(errc::invalid_argument) when the shape's product is not
  /// world.size(), a size is below 1, or the names are not one per dimension, distinct and
  /// non-empty; errc::mismatch when ranks passed different shapes.
  mesh(Comm& world, std::vector<int> shape, std::vector<std::string> names = {})
      : mesh(world, std::move(shape), std::move(names), world.opts()) {}
  mesh(Comm& world, std::vector<int> shape, std::vector<std::string> names,
       const options& child_opts)
      : world_(&world), shape_(std::move(shape)), names_(std::move(names)) {
    check_arguments();
    check_same_shape();
    coords_ = coords_of(world.rank());
    for (std::size_t d = 0; d < shape_.size(); ++d) {
      std::vector<int> others = coords_;
      others[d] = 0;
      auto c = world.split(rank_at(others), coords_[d], child_opts);
      comms_.push_back(std::move(*c));  // every rank has a color: every rank gets one
    }
  }

  [[nodiscard]] std::size_t ndim() const noexcept { return shape_.size(); }
  [[nodiscard]] const std::vector<int>& shape() const noexcept { return shape_; }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  /// The index of dimension `name`; raises errc::invalid_argument if there is none.
  [[nodiscard]] std::size_t dim(std::string_view name) const {
    for (std::size_t d = 0; d < names_.size(); ++d)
      if (names_[d] == name) return d;
    throw error(errc::invalid_argument, "mesh", 0, world_->rank(), -1,
                "the mesh has no dimension named '" + std::string(name) + "'");
  }
  /// The number of ranks along a dimension.
  [[nodiscard]] int size(std::string_view name) const { return shape_[dim(name)]; }
  /// This rank's coordinates, one per dimension; and one of them.
  [[nodiscard]] const std::vector<int>& coords() const noexcept { return coords_; }
  [[nodiscard]] int coord(std::string_view name) const { return coords_[dim(name)]; }
  /// The world rank at `coords` (one per dimension, each in range).
  [[nodiscard]] int rank_at(std::span<const int> coords) const {
    if (coords.size() != shape_.size()) bad("rank_at takes one coordinate per dimension");
    int r = 0;
    for (std::size_t d = 0; d < shape_.size(); ++d) {
      if (coords[d] < 0 || coords[d] >= shape_[d])
        bad("coordinate " + std::to_string(coords[d]) + " is outside dimension '" + names_[d] +
            "' of size " + std::to_string(shape_[d]));
      r = r * shape_[d] + coords[d];
    }
    return r;
  }
  /// The coordinates of world rank `r`.
  [[nodiscard]] std::vector<int> coords_of(int r) const {
    std::vector<int> c(shape_.size());
    for (std::size_t d = shape_.size(); d-- > 0;) {
      c[d] = r % shape_[d];
      r /= shape_[d];
    }
    return c;
  }
  /// The communicator along a dimension: the ranks that share every other coordinate with
  /// this one, ranked by their coordinate along it.
  [[nodiscard]] Comm& operator[](std::string_view name) { return comms_[dim(name)]; }
  [[nodiscard]] Comm& along(std::size_t d) { return comms_.at(d); }
  /// The communicator the mesh arranges.
  [[nodiscard]] Comm& world() noexcept { return *world_; }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    throw error(errc::invalid_argument, "mesh", 0, world_->rank(), -1, why);
  }

  void check_arguments() {
    if (shape_.empty()) bad("a mesh needs at least one dimension");
    long long product = 1;
    for (int s : shape_) {
      if (s < 1) bad("every dimension needs at least 1 rank, not " + std::to_string(s));
      product *= s;
      if (product > world_->size()) break;
    }
    if (product != world_->size())
      bad("the shape's ranks do not make the world's " + std::to_string(world_->size()));
    if (names_.empty())
      for (std::size_t d = 0; d < shape_.size(); ++d) names_.push_back(std::to_string(d));
    if (names_.size() != shape_.size())
      bad(std::to_string(names_.size()) + " names for " + std::to_string(shape_.size()) +
          " dimensions");
    for (std::size_t a = 0; a < names_.size(); ++a) {
      // m[""] would find it, but an empty name is a slip (a variable never set), not a choice.
      if (names_[a].empty()) bad("dimension " + std::to_string(a) + "'s name is empty");
      for (std::size_t b = a + 1; b < names_.size(); ++b)
        if (names_[a] == names_[b]) bad("dimension name '" + names_[a] + "' appears twice");
    }
  }

  // Ranks with another shape of the same size would split into other groups without noticing.
  void check_same_shape() {
    if constexpr (std::is_same_v<typename Comm::memory_space, host_memory>) {
      const std::int64_t mine = detail::ranks_digest(shape_);
      std::vector<std::int64_t> all(static_cast<std::size_t>(world_->size()));
      world_->all_gather(std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(all));
      for (std::size_t q = 0; q < all.size(); ++q)
        if (all[q] != mine)
          throw error(errc::mismatch, "mesh", 0, world_->rank(), static_cast<int>(q),
                      "rank " + std::to_string(q) + " arranged the world in another shape");
    }  // on GPU memory (nccl) a shape that differs goes unnoticed: no host all-gather there
  }

  Comm* world_;
  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> coords_;
  std::vector<Comm> comms_;
};

}  // namespace tutti::inline v0
