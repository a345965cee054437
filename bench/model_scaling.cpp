// The α-β-γ model's predictions for all_reduce on worlds across hosts, and tutti::automatic's
// pick, from 8 to 1,024 ranks (hosts × ranks per host): what docs/scaling.md tabulates.
//
//   model-scaling [--link-gbps G] [--link-alpha-us A] [--sizes 4,65536,...] [--shapes 1x8,2x4,...]
//                 [--inside shm|gloo] [--flat-inside copies|tcp] [--ranks-per-cpu R]
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
// runs them; 0, the default, a CPU per rank). Prints one markdown table per size: predicted
// microseconds per policy, and the pick. No ranks run: this is the model alone.

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <tutti/algorithm/automatic.hpp>
#include <tutti/detail/gloo/costs.hpp>
#include <tutti/transport/shm.hpp>

namespace {

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    out.emplace_back(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  return out;
}

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

}  // namespace

int main(int argc, char** argv) {
  double gbps = 10, alpha = 30;
  std::string inside = "shm";
  std::string flat_inside = "copies";
  double per_cpu = 0;
  std::vector<std::string> sizes{"4", "65536", "1048576", "16777216", "268435456"};
  std::vector<std::string> shapes{"1x8", "2x4",  "4x2",  "2x8",  "4x8",
                                  "8x8", "16x8", "32x8", "64x8", "128x8"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--link-gbps")
      gbps = std::atof(argv[i + 1]);
    else if (flag == "--link-alpha-us")
      alpha = std::atof(argv[i + 1]);
    else if (flag == "--sizes")
      sizes = split_list(argv[i + 1]);
    else if (flag == "--shapes")
      shapes = split_list(argv[i + 1]);
    else if (flag == "--inside")
      inside = argv[i + 1];
    else if (flag == "--flat-inside")
      flat_inside = argv[i + 1];
    else if (flag == "--ranks-per-cpu")
      per_cpu = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "model-scaling: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (gbps <= 0 || alpha < 0 || (inside != "shm" && inside != "gloo") ||
      (flat_inside != "copies" && flat_inside != "tcp") || per_cpu < 0) {
    std::fprintf(stderr,
                 "model-scaling: --link-gbps must be > 0, --link-alpha-us >= 0, --inside shm "
                 "or gloo, --flat-inside copies or tcp, --ranks-per-cpu >= 0\n");
    return 2;
  }
  namespace gloo_costs = tutti::detail::gloo_costs;
  // A flat policy's message between two ranks of a host (gloo::world_costs).
  const tutti::cost_model flat =
      flat_inside == "copies" ? gloo_costs::single_copy(gloo_costs::tcp) : gloo_costs::tcp;
  const tutti::cost_model local = inside == "shm" ? tutti::shm::costs : flat;
  // Which policies get a column: all but direct and bruck (never picked for all_reduce across
  // hosts); hierarchical only where a host's ranks share memory.
  const auto shown = [&]<class P>() {
    return !std::is_same_v<P, tutti::direct> && !std::is_same_v<P, tutti::bruck> &&
           (inside == "shm" || !std::is_same_v<P, tutti::hierarchical>);
  };
  using tutti::detail::collective;
  using candidates = tutti::automatic::candidates;
  std::printf(
      "Link between hosts: %g Gbit/s, α %g µs; inside a host: tutti::%s's costs, a flat "
      "policy's message %s.\n\n",
      gbps, alpha, inside.c_str(),
      flat_inside == "copies" ? "a single copy" : "through loopback TCP");
  for (const auto& size : sizes) {
    const double bytes = std::atof(size.c_str());
    std::printf("### all_reduce of %s\n\n| hosts × ranks | ranks |", human(bytes).c_str());
    candidates::for_each([&]<class P>() {
      if (shown.template operator()<P>()) std::printf(" %s |", P::name);
    });
    std::printf(" automatic picks |\n|---|---:|");
    candidates::for_each([&]<class P>() {
      if (shown.template operator()<P>()) std::printf("---:|");
    });
    std::printf("---|\n");
    for (const auto& shape : shapes) {
      const auto x = shape.find('x');
      const int h = std::atoi(shape.substr(0, x).c_str());
      const int l = std::atoi(shape.substr(x + 1).c_str());
      tutti::cost_model m = local;  // γ: the reduction runs on the host alike
      m.alpha_us = h > 1 ? alpha : local.alpha_us;
      m.beta_us_per_byte = h > 1 ? 8e-3 / gbps : local.beta_us_per_byte;
      m.segment_beta_us_per_byte = 0;
      m.ranks_per_cpu = per_cpu;
      // Between hosts, and a flat policy's messages inside one, ride gloo's TCP pairs, where an
      // exchange costs two α (cost_model::exchange_alphas).
      m.exchange_alphas =
          h > 1 ? tutti::detail::gloo_costs::tcp.exchange_alphas : local.exchange_alphas;
      m.hosts = h;
      m.ranks_per_host = l;
      m.local_alpha_us = local.alpha_us;
      m.local_beta_us_per_byte = local.beta_us_per_byte;
      // On tutti::cluster a flat policy's messages inside a host ride gloo (its single copies
      // or TCP), not shared memory: what layered tells automatic.
      m.flat_local_alpha_us = flat.alpha_us;
      m.flat_local_beta_us_per_byte = flat.beta_us_per_byte;
      const tutti::detail::cost_inputs in(bytes, h * l, m);
      std::printf("| %d × %d | %d |", h, l, h * l);
      std::string best;
      double best_cost = std::numeric_limits<double>::infinity();
      candidates::for_each([&]<class P>() {
        if (shown.template operator()<P>()) {
          const double c = tutti::detail::predicted_cost<P>(collective::all_reduce, in);
          std::printf(" %s |",
                      c == std::numeric_limits<double>::infinity() ? "–" : micros(c).c_str());
          if (c < best_cost) {
            best_cost = c;
            best = P::name;
          }
        }
      });
      std::printf(" %s |\n", best.c_str());
    }
    std::printf("\n");
  }
  return 0;
}
