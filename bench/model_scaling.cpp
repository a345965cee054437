// The α-β-γ model's predictions for all_reduce (or all_gather, reduce_scatter) on worlds across
// hosts, and tutti::automatic's pick, from 8 to 1,024 ranks (hosts × ranks per host): what
// docs/scaling.md tabulates.
//
//   model-scaling [--link-gbps G] [--link-alpha-us A] [--sizes 4,64K,1M,...] [--shapes 1x8,2x4,...]
//                 [--inside shm|gloo] [--flat-inside copies|tcp] [--ranks-per-cpu R]
//                 [--collective all_reduce|all_gather|reduce_scatter] [--format markdown|csv]
//
// Inside a host: tutti::shm's costs for hierarchical (tutti::cluster), or with --inside gloo no
// hierarchical column (a flat tutti::gloo world across hosts); a flat policy's message between
// two ranks of a host rides gloo, as a single copy (--flat-inside copies, the default: where the
// ranks of a host may read each other's memory, which tutti::gloo probes when it joins) or
// through loopback TCP (--flat-inside tcp: where they may not). Between
// hosts: a link of G Gbit/s (default 10) with α = A µs (default 30), every rank of a host
// sharing its link, as tutti::cluster and tutti::gloo tell automatic when TUTTI_LINK_GBPS /
// TUTTI_LINK_ALPHA_US are set. --ranks-per-cpu R prices a machine whose ranks outnumber its
// CPUs R to one (cost_model::ranks_per_cpu: simulated hosts sharing one machine, as bench/netns
// runs them; 0, the default, a CPU per rank). --collective all_gather or reduce_scatter prices
// that collective instead, each size being the whole gathered or scattered vector (as
// tutti-bench and nccl-tests count it). Prints one markdown table per size: predicted
// microseconds per policy, and the pick; --format csv prints one line per size, shape and
// policy instead (collective,hosts,ranks_per_host,bytes,policy,predicted_us,pick: microseconds
// to a thousandth, the pick that size and shape's), which bench/netns/compare_hosts.sh MODEL=1
// sets next to its measurements. No ranks run: this is the model alone.

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <tutti/algorithm/automatic.hpp>
#include <tutti/detail/gloo/costs.hpp>
#include <tutti/transport/shm.hpp>

#include "tb/cli.hpp"

namespace {

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
  return buf;
}

std::string micros(double us) {
  char buf[32];
  if (us >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f s", us / 1e6);
  else if (us >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1f ms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f µs", us);
  return buf;
}

/// What the command line asks for.
struct settings {
  double gbps = 10;
  double alpha = 30;
  std::string inside = "shm";
  std::string flat_inside = "copies";
  double per_cpu = 0;
  std::string collective = "all_reduce";
  std::string format = "markdown";
  std::vector<double> sizes{4, 65536, 1048576, 16777216, 268435456};
  std::vector<std::pair<int, int>> shapes{{1, 8}, {2, 4},  {4, 2},  {2, 8},  {4, 8},
                                          {8, 8}, {16, 8}, {32, 8}, {64, 8}, {128, 8}};
};

/// "HxL": hosts × ranks per host, each a whole number in 1..4096 (tutti-bench's parse_count).
std::pair<int, int> shape_of(const std::string& flag, const std::string& s) {
  const auto x = s.find('x');
  const std::string why = flag + ": '" + s + "': each shape HOSTSxRANKS, whole numbers in 1..4096";
  if (x == std::string::npos) throw std::invalid_argument(why);
  const std::size_t h = tutti_bench::detail::parse_count(flag, s.substr(0, x));
  const std::size_t l = tutti_bench::detail::parse_count(flag, s.substr(x + 1));
  if (h < 1 || h > 4096 || l < 1 || l > 4096) throw std::invalid_argument(why);
  return {static_cast<int>(h), static_cast<int>(l)};
}

/// Reads the flags into `o`; the error, or empty. Lists and sizes read as tutti-bench's do
/// (4,64K,16M).
std::string parse(int argc, char** argv, settings& o) try {
  using tutti_bench::detail::split_list;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return flag + ": missing value";
    const std::string value = argv[i + 1];
    if (flag == "--link-gbps" || flag == "--link-alpha-us" || flag == "--ranks-per-cpu") {
      (flag == "--link-gbps"       ? o.gbps
       : flag == "--link-alpha-us" ? o.alpha
                                   : o.per_cpu) = tutti_bench::detail::parse_real(flag, value);
    } else if (flag == "--sizes") {
      o.sizes.clear();
      for (const auto& part : split_list(value)) {
        const std::size_t bytes = tutti_bench::detail::parse_size(flag, part);
        if (bytes == 0) return flag + ": sizes start at 1 byte";
        o.sizes.push_back(static_cast<double>(bytes));
      }
    } else if (flag == "--shapes") {
      o.shapes.clear();
      for (const auto& part : split_list(value)) o.shapes.push_back(shape_of(flag, part));
    } else if (flag == "--inside") {
      o.inside = value;
    } else if (flag == "--flat-inside") {
      o.flat_inside = value;
    } else if (flag == "--collective") {
      o.collective = value;
    } else if (flag == "--format") {
      o.format = value;
    } else {
      return "unknown flag " + flag;
    }
  }
  if (o.gbps <= 0 || o.alpha < 0 || (o.inside != "shm" && o.inside != "gloo") ||
      (o.flat_inside != "copies" && o.flat_inside != "tcp") || o.per_cpu < 0 || o.sizes.empty() ||
      o.shapes.empty() ||
      (o.collective != "all_reduce" && o.collective != "all_gather" &&
       o.collective != "reduce_scatter") ||
      (o.format != "markdown" && o.format != "csv"))
    return "--link-gbps must be > 0, --link-alpha-us >= 0, --inside shm or gloo, --flat-inside "
           "copies or tcp, --ranks-per-cpu >= 0, --sizes and --shapes not empty, --collective "
           "all_reduce, all_gather or reduce_scatter, --format markdown or csv";
  return {};
} catch (const std::invalid_argument& e) {
  return e.what();
}

/// What automatic is told about a world of `h` hosts × `l` ranks: `local` inside a host (for
/// hierarchical), `flat` for a flat policy's message between two ranks of one host, the link
/// between hosts.
tutti::cost_model model_for(int h, int l, const settings& o, const tutti::cost_model& local,
                            const tutti::cost_model& flat) {
  tutti::cost_model m = local;  // γ: the reduction runs on the host alike
  m.alpha_us = h > 1 ? o.alpha : local.alpha_us;
  m.beta_us_per_byte = h > 1 ? 8e-3 / o.gbps : local.beta_us_per_byte;
  m.segment_beta_us_per_byte = 0;
  m.ranks_per_cpu = o.per_cpu;
  // Between hosts, and a flat policy's messages inside one, ride gloo's TCP pairs, where an
  // exchange costs two α (cost_model::exchange_alphas).
  m.exchange_alphas =
      h > 1 ? tutti::detail::gloo_costs::tcp.exchange_alphas : local.exchange_alphas;
  m.hosts = h;
  m.ranks_per_host = l;
  m.local_alpha_us = local.alpha_us;
  m.local_beta_us_per_byte = local.beta_us_per_byte;
  // On tutti::cluster a flat policy's messages inside a host ride gloo (its single copies or
  // TCP), not shared memory: what layered tells automatic.
  m.flat_local_alpha_us = flat.alpha_us;
  m.flat_local_beta_us_per_byte = flat.beta_us_per_byte;
  return m;
}

// What model-scaling prices: each policy shown for one collective, size and shape, with the
// costs of a message inside a host and across.
class pricer {
 public:
  explicit pricer(const settings& o)
      : o_(o), flat_(flat_of(o)), local_(o.inside == "shm" ? tutti::shm::costs : flat_) {}

  // Which policies get a column: not direct (it needs a segment all ranks share: it runs
  // nothing on gloo or cluster), for all_reduce not bruck (never picked across hosts), for the
  // others every one that prices it somewhere here; hierarchical only where a host's ranks
  // share memory.
  template <class P>
  [[nodiscard]] bool shown() const {
    if (std::is_same_v<P, tutti::direct>) return false;
    if (o_.inside != "shm" && std::is_same_v<P, tutti::hierarchical>) return false;
    if (k_ == collective::all_reduce) return !std::is_same_v<P, tutti::bruck>;
    for (const double bytes : o_.sizes)
      for (const auto& shape : o_.shapes)
        if (tutti::detail::predicted_cost<P>(k_, model_of(shape, bytes)) < infinity) return true;
    return false;
  }

  // Each policy shown, priced for one size and shape (infinity: it predicts nothing there),
  // and automatic's pick among them.
  [[nodiscard]] std::pair<std::vector<std::pair<const char*, double>>, std::string> priced(
      std::pair<int, int> shape, double bytes) const {
    const auto in = model_of(shape, bytes);
    std::vector<std::pair<const char*, double>> costs;
    std::string pick;
    double pick_cost = infinity;
    candidates::for_each([&]<class P>() {
      if (!shown<P>()) return;
      const double c = tutti::detail::predicted_cost<P>(k_, in);
      costs.emplace_back(P::name, c);
      if (c < pick_cost) {
        pick_cost = c;
        pick = P::name;
      }
    });
    return {costs, pick};
  }

  static constexpr double infinity = std::numeric_limits<double>::infinity();
  using candidates = tutti::automatic::candidates;

 private:
  using collective = tutti::detail::collective;

  // A flat policy's message between two ranks of a host (gloo::world_costs).
  static tutti::cost_model flat_of(const settings& o) {
    namespace gloo_costs = tutti::detail::gloo_costs;
    return o.flat_inside == "copies" ? gloo_costs::single_copy(gloo_costs::tcp) : gloo_costs::tcp;
  }
  [[nodiscard]] tutti::detail::cost_inputs model_of(std::pair<int, int> shape, double bytes) const {
    const auto [h, l] = shape;
    return tutti::detail::cost_inputs(bytes, h * l, model_for(h, l, o_, local_, flat_));
  }

  const settings& o_;
  tutti::cost_model flat_, local_;
  collective k_ = o_.collective == "all_gather"       ? collective::all_gather
                  : o_.collective == "reduce_scatter" ? collective::reduce_scatter
                                                      : collective::all_reduce;
};

// One line per size, shape and policy that predicts something there.
void print_csv(const settings& o, const pricer& p) {
  std::printf("collective,hosts,ranks_per_host,bytes,policy,predicted_us,pick\n");
  for (const double bytes : o.sizes)
    for (const auto& shape : o.shapes) {
      const auto [costs, pick] = p.priced(shape, bytes);
      for (const auto& [name, c] : costs)
        if (c < pricer::infinity)
          std::printf("%s,%d,%d,%.0f,%s,%.3f,%s\n", o.collective.c_str(), shape.first, shape.second,
                      bytes, name, c, pick.c_str());
    }
}

// A markdown table per size: a row per shape, a column per policy shown, and automatic's pick.
void print_tables(const settings& o, const pricer& p) {
  std::printf(
      "Link between hosts: %g Gbit/s, α %g µs; inside a host: tutti::%s's costs, a flat "
      "policy's message %s.\n\n",
      o.gbps, o.alpha, o.inside.c_str(),
      o.flat_inside == "copies" ? "a single copy" : "through loopback TCP");
  for (const double bytes : o.sizes) {
    std::printf("### %s of %s\n\n| hosts × ranks | ranks |", o.collective.c_str(),
                human(bytes).c_str());
    pricer::candidates::for_each([&]<class P>() {
      if (p.shown<P>()) std::printf(" %s |", P::name);
    });
    std::printf(" automatic picks |\n|---|---:|");
    pricer::candidates::for_each([&]<class P>() {
      if (p.shown<P>()) std::printf("---:|");
    });
    std::printf("---|\n");
    for (const auto& shape : o.shapes) {
      std::printf("| %d × %d | %d |", shape.first, shape.second, shape.first * shape.second);
      const auto [costs, pick] = p.priced(shape, bytes);
      for (const auto& [name, c] : costs)
        std::printf(" %s |", c == pricer::infinity ? "–" : micros(c).c_str());
      std::printf(" %s |\n", pick.c_str());
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  settings o;
  if (const std::string why = parse(argc, argv, o); !why.empty()) {
    std::fprintf(stderr, "model-scaling: %s\n", why.c_str());
    return 2;
  }
  const pricer p(o);
  if (o.format == "csv")
    print_csv(o, p);
  else
    print_tables(o, p);
  return 0;
}
