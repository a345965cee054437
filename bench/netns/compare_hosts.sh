#!/usr/bin/env bash
# all_reduce (or another COLLECTIVE) across simulated hosts: tutti's policies over its gloo
# transport next to Gloo's own algorithms, in one invocation, float sum, results checked by the
# programs. Each "host" is a network namespace; the hosts are joined by veth pairs to a bridge
# that lives in a namespace of its own (as tests/netns/run.sh does: the machine's own network is
# untouched), optionally shaped with tc tbf or htb. Every rank of a host runs inside that host's
# namespace, started with the variables a multi-host launcher sets (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE=RANKS_PER_HOST, MASTER_ADDR = host 0's address, MASTER_PORT), so ranks of
# one host share a network namespace (tutti's single copies between them work, as on a real
# host) and every byte between hosts crosses two (shaped) veth links and the bridge:
#   tutti-bench COLLECTIVE --transport gloo --algo A            (A: tutti's policies)
#   tutti-bench COLLECTIVE --transport T --algo A                (A@T: on another transport, e.g.
#                                                                 hierarchical@cluster)
#   TUTTI_GLOO_CMA=0 tutti-bench ... --algo automatic            (automatic_tcp, not by default)
#   tutti-bench-gloo COLLECTIVE --algo X                         (gloo_X: Gloo's own)
#   TORCH_PY bench/torch/allreduce.py --launched --backend B     (torch_B: torch.distributed on
#     --collective COLLECTIVE                                     "tutti" or "gloo"; torch_tutti@T
#                                                                 with TUTTI_TORCH_TRANSPORT=T)
# both out of place where the algorithm has that form (PLACEMENT), time = the slowest rank's mean
# (-a 3).
# Runs as root (it makes namespaces); needs iproute2's ip, tc (with RATE), ethtool (with
# FRAMES=whole), python3, timeout.
#
#   bench/netns/compare_hosts.sh
#   HOSTS=4 RANKS_PER_HOST=1 RATE=1gbit bench/netns/compare_hosts.sh
#
# Runs every algorithm ROUNDS times, the algorithms interleaved within each round so slow drift
# on a noisy machine hits all alike; keeps each algorithm's best (lowest) time per size, or its
# median (STAT); prints a markdown table: time in microseconds per size and algorithm, tutti's
# best flat policy (ring, tree, recursive_halving, recursive_doubling, bruck, direct: whichever
# ran) and Gloo's best algorithm, then time ratios (< 1: tutti is faster): best flat / best
# Gloo, and for every other tutti policy that ran (automatic, automatic_tcp,
# hierarchical@cluster, ...) that policy / best Gloo; then the sizes where the best flat
# policy misses the target (no slower than Gloo's best at any size, >= 1.3x faster from
# 1 MiB). The same goes to OUT/summary.md.
#
# Environment:
#   HOSTS (2)                       simulated hosts (network namespaces), 1..250
#   RANKS_PER_HOST (2)              ranks (processes) per host
#   RATE (unset: unshaped)          tc rate of every host's link, both directions (e.g. 1gbit,
#                                   100mbit): a SHAPER qdisc on the host's end of its veth (its
#                                   egress) and one on the bridge's end (its ingress)
#   FRAMES (gso)                    gso: the veths' defaults (64 KiB GSO packets), which need a
#                                   tbf bucket of 256 KiB (see below); whole: every link sends
#                                   whole frames (GSO, TSO and GRO off on the veths, ethtool) of
#                                   MTU bytes, so the bucket can be a few frames and a message
#                                   pays RATE from its first byte, as on a real link
#   MTU (9000 with FRAMES=whole)    every link's MTU (jumbo frames, as cluster networks use)
#   SHAPER (tbf)                    the qdisc that shapes each link at RATE: tbf, or htb (one
#                                   class of rate = ceil = RATE, its buckets HTB_BURST; needs
#                                   FRAMES=whole): htb with buckets of one frame carries the
#                                   line rate both ways and lets at most about one frame of a
#                                   message pass free after a pause, where tbf with a bucket
#                                   that small loses a fifth of the rate to its late timer and
#                                   with a peak bucket of two frames passes two (see below)
#   HTB_BURST (one frame: MTU + 64) htb's burst and cburst in bytes (tc size syntax)
#   TBF_BURST (see below)           tbf burst in bytes (tc size syntax); default 32 KiB with
#                                   FRAMES=whole, else max(256 KiB, 2 ms at RATE)
#   TBF_LATENCY (50ms)              tbf latency (tc time syntax): the queue it may hold
#   TBF_PEAKRATE (unset)            tbf peakrate (tc rate syntax, above RATE): the fastest the
#                                   bucket may drain, in a second bucket of TBF_PEAK_FRAMES
#                                   frames (tbf's mtu), so a message after a pause passes at no
#                                   more than it instead of at the veth's speed, but for its first
#                                   TBF_PEAK_FRAMES frames, which that bucket lets through at once
#   TBF_PEAK_FRAMES (2)             frames in that second bucket, 1 or more (needs TBF_PEAKRATE):
#                                   with 2 and 9000-byte frames, a message of up to 18 KB pays no
#                                   rate after a pause (ring's 16 KiB steps on 2 x 2 at 64 KiB
#                                   took 0.72x the time they took with 1: bench/RESULTS.md)
#   COLLECTIVE (all_reduce)         all_reduce, all_gather or reduce_scatter (sizes: the whole
#                                   gathered or scattered vector, as nccl-tests); Gloo has one
#                                   all_gather (gloo_ring: a ring) and no reduce_scatter; torch_*
#                                   entries run all_gather_into_tensor, reduce_scatter_tensor
#   MINBYTES (4)  MAXBYTES (64M)    sizes, nccl-tests syntax (K/M/G), doubling
#   ROUNDS (2)                      runs per algorithm
#   ITERS (unset: ~0.2 s per size)  timed calls per size in every run (-n): a fixed count makes
#                                   runs as long at every size and for every program
#   CPU (unset)                     1: also the CPU time each call costs, all ranks together
#                                   (user and system, the median over the rounds: bash's `times`
#                                   of each rank's process, divided by ITERS + 5 warm-up calls;
#                                   connecting and the one checked call are included, so use a
#                                   large ITERS). Needs ITERS and one size (MINBYTES = MAXBYTES)
#   MODEL (unset)                   1: also the alpha-beta-gamma model next to the measurement
#                                   (HOSTS >= 2): model-scaling (from BIN_DIR) prices each of
#                                   tutti's policies that ran and that it prices (ring, tree,
#                                   recursive_halving, recursive_doubling on gloo; hierarchical
#                                   and those as NAME@cluster) with the link as automatic saw it
#                                   (the median of every world's figures at join: the probe's,
#                                   or TUTTI_LINK_GBPS / TUTTI_LINK_ALPHA_US where set) and the
#                                   machine's ranks per CPU; a table of predicted us and
#                                   predicted / measured per size, and automatic's pick beside
#                                   the fastest policy measured. Sets TUTTI_DEBUG=info where
#                                   unset (the figures come from rank 0's log)
#   STAT (best)                     best: each algorithm's lowest time per size over the rounds;
#                                   median: its median (the middle of the sorted times; the mean
#                                   of the two middle ones for an even ROUNDS), which a program
#                                   that is fast only now and then does not win
#   PLACEMENT (out-of-place)        out-of-place or in-place: tutti's policies and Gloo's ring and
#                                   bcube; Gloo's classic classes (ring_chunked,
#                                   halving_doubling) run in place either way, so in-place is
#                                   the like-for-like comparison with them (out of place, a
#                                   tutti rank first copies its input to its output)
#   ALGOS (automatic ring tree recursive_halving gloo_ring gloo_bcube gloo_ring_chunked
#          gloo_halving_doubling)   space-separated: tutti-bench --algo names (and automatic_tcp),
#                                   each on --transport gloo, or NAME@TRANSPORT for another
#                                   transport of tutti-bench; gloo_X for tutti-bench-gloo --algo X;
#                                   torch_tutti, torch_tutti@T (T: shm, gloo, cluster) and
#                                   torch_gloo for the collective through torch.distributed
#                                   (all_reduce in place, the others out of place; needs
#                                   TORCH_PY)
#   TORCH_PY (build/torch-venv/bin/python)
#                                   the Python with torch and tutti_torch for torch_* entries
#                                   (scripts/lib.sh tutti_torch_venv makes it)
#   SLOW_START_AFTER_IDLE (unset)   net.ipv4.tcp_slow_start_after_idle in every host's
#                                   namespace (0: a connection idle for a while keeps its
#                                   congestion window; the kernel's default, 1, restarts slow)
#   TCP_CC (unset: the machine's)   net.ipv4.tcp_congestion_control in every host's namespace
#                                   (cubic: Linux's default; bbr paces at the rate it measured,
#                                   which tbf's bucket lets run at the veth's speed)
#   RUN_TIMEOUT (900)               seconds allowed per run (each rank)
#   BIN_DIR (build/release/bench)   where tutti-bench and tutti-bench-gloo are; they are copied
#                                   to a private directory at the start, so a rebuild during the
#                                   run does not change what runs
#   OUT (a new mktemp -d)           where the raw output goes, kept after the run: per run
#                                   ALGO.rROUND.csv and .json (rank 0; bench/plot reads the
#                                   JSON), ALGO.rROUND.rankK.err (non-empty stderr only), and
#                                   summary.md (what is printed)
#   PRIO (unset)                    run every rank under `chrt -f PRIO` (see bench/compare_gloo.sh;
#                                   only with HOSTS * RANKS_PER_HOST <= cores)
# Exit status: 0; 1 if a run failed or reported wrong results; 2 on a usage/setup error;
# 77 when it cannot run here (not root, no `ip netns`, no tbf or htb with RATE), the reason on
# stdout.
# Everything it made (namespaces, links, processes, temporary files; not OUT) is removed on
# exit, also on failure or Ctrl-C.
set -euo pipefail

die() {
  printf 'compare_hosts.sh: %s\n' "$*" >&2
  exit 2
}
skip() {
  printf 'compare_hosts.sh: SKIPPED: %s\n' "$*"
  exit 77
}
case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  "") ;;
  *) die "takes no arguments (see --help); settings are environment variables" ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

hosts="${HOSTS:-2}"
rph="${RANKS_PER_HOST:-2}"
rate="${RATE:-}"
collective="${COLLECTIVE:-all_reduce}"
minbytes="${MINBYTES:-4}"
maxbytes="${MAXBYTES:-64M}"
rounds="${ROUNDS:-2}"
iters="${ITERS:-}"
cpu="${CPU:-}"
stat="${STAT:-best}"
price="${MODEL:-}" # MODEL=1: the model next to the measurement
placement="${PLACEMENT:-out-of-place}"
run_timeout="${RUN_TIMEOUT:-900}"
bin_dir="${BIN_DIR:-$repo/build/release/bench}"
torch_py="${TORCH_PY:-$repo/build/torch-venv/bin/python}"
read -r -a algos <<<"${ALGOS:-automatic ring tree recursive_halving gloo_ring gloo_bcube gloo_ring_chunked gloo_halving_doubling}"
[[ "$hosts" =~ ^[1-9][0-9]*$ && "$hosts" -le 250 ]] || die "HOSTS must be an integer in 1..250"
[[ "$rph" =~ ^[1-9][0-9]*$ ]] || die "RANKS_PER_HOST must be a positive integer"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
[[ -z "$iters" || "$iters" =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer"
[[ "$stat" == best || "$stat" == median ]] || die "STAT must be best or median"
[[ -z "$cpu" || "$cpu" == 1 ]] || die "CPU must be 1 or unset"
[[ -z "$cpu" || (-n "$iters" && "$minbytes" == "$maxbytes") ]] ||
  die "CPU=1 needs ITERS and one size (MINBYTES = MAXBYTES): CPU time is counted per run"
[[ -z "$price" || "$price" == 1 ]] || die "MODEL must be 1 or unset"
[[ -z "$price" || "$hosts" -ge 2 ]] || die "MODEL=1 prices a link between hosts: HOSTS must be 2 or more"
[[ "$placement" == out-of-place || "$placement" == in-place ]] ||
  die "PLACEMENT must be out-of-place or in-place"
[[ "$run_timeout" =~ ^[1-9][0-9]*$ ]] || die "RUN_TIMEOUT must be a positive number of seconds"
((${#algos[@]} > 0)) || die "ALGOS is empty"
case "$collective" in
  all_reduce | all_gather | reduce_scatter) ;;
  *) die "COLLECTIVE must be all_reduce, all_gather or reduce_scatter" ;;
esac
prio=()
if [[ -n "${PRIO:-}" ]]; then
  [[ "$PRIO" =~ ^[1-9][0-9]?$ ]] || die "PRIO must be a real-time priority, 1-99"
  chrt -f "$PRIO" true 2>/dev/null || die "chrt -f $PRIO is not allowed here (needs root or CAP_SYS_NICE)"
  prio=(chrt -f "$PRIO")
fi
[[ -x "$bin_dir/tutti-bench" && -x "$bin_dir/tutti-bench-gloo" ]] ||
  die "'$bin_dir/tutti-bench' or '$bin_dir/tutti-bench-gloo' not found (set BIN_DIR); configure with
  -DTUTTI_WITH_GLOO=ON (the presets do) and build the targets tutti-bench tutti-bench-gloo"
command -v python3 >/dev/null || die "python3 is needed for the tables"
[[ -z "$price" || -x "$bin_dir/model-scaling" ]] ||
  die "MODEL=1 needs '$bin_dir/model-scaling' (build the target model-scaling)"
[[ -z "$price" ]] || export TUTTI_DEBUG="${TUTTI_DEBUG:-info}"

# tc rate syntax -> bits per second (empty when it is not one tc accepts in the usual units).
rate_bits() {
  awk -v r="$1" 'BEGIN {
    r = tolower(r)
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    n = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
    m[""] = 1; m["bit"] = 1; m["bps"] = 8
    split("k m g t", p, " ")
    for (i = 1; i <= 4; i++) {
      m[p[i] "bit"] = 1000 ^ i; m[p[i] "ibit"] = 1024 ^ i
      m[p[i] "bps"] = 8 * 1000 ^ i; m[p[i] "ibps"] = 8 * 1024 ^ i
    }
    if (!(u in m) || n * m[u] <= 0) exit 1
    printf "%.0f\n", n * m[u]
  }'
}
# tbf's parameters. What they do to TCP was measured on 2 namespaces at 1gbit (a 2-core VM, one
# long TCP stream per direction; tbf counts Ethernet frames, so ~0.957 Gbit/s of payload is the
# line rate):
#  - FRAMES=whole: with segmentation offloads off the veths send frames of one MTU, and a
#    bucket of 32 KiB (3.6 frames of 9000 bytes) keeps both directions at the line rate (iperf3
#    --bidir: 0.93-0.95 Gbit/s each way), while a message after an idle spell passes at close
#    to RATE: 64 KiB at 1.37 Gbit/s, 256 KiB at 1.07, 1 MiB at 1.01 (with GSO and a 256 KiB
#    bucket: 3.06, 4.83 and 1.22), as on a real link. 16 KiB: 0.79 each way; MTU 1500 with
#    offloads off: 0.31 (each frame costs CPU). The frames cost CPU all the same: with 4 hosts
#    of one rank on 2 CPUs schedules of many steps take 1.3-1.9x the model's time from 64 KiB
#    (bench/RESULTS.md).
#  - FRAMES=gso (the default): burst is the bucket: it must hold several 64 KiB GSO packets (veth
#    sends them whole) and the tokens that accrue while tbf's watchdog timer fires late on a busy
#    machine, which are lost once the bucket is full. burst 16kb (smaller than one GSO packet,
#    which tbf then splits): 0.75 Gbit/s; 64kb: 0.95 one way but only ~0.65 each way with data in
#    both directions (as all_reduce always has); 128kb and more: 0.95 each way. Hence max(256
#    KiB, 2 ms at RATE). The price: after an idle spell (the gaps between a collective's own
#    steps among them) up to `burst` bytes pass above RATE (256 KiB at 4.8 Gbit/s), so below 1
#    MiB every schedule runs faster than a real link allows, and a schedule of many steps gets a
#    burst at each.
#  - SHAPER=htb, FRAMES=whole, burst = cburst = one frame: both directions at the line rate
#    (iperf3 --bidir 0.98-0.99 Gbit/s, no retransmissions), where tbf with a one-frame bucket
#    (burst, or peakrate's mtu) carries 0.75-0.81 (0.81-0.92 with peakrate 1.2-1.4gbit): tbf
#    drops the tokens its late timer would have earned, htb does not. A message after a pause
#    (TCP ping-pong between two namespaces, 2 ms apart, medians of 80; alpha 40 us): at 64 KiB
#    -1 MiB htb took up to 90 us less than alpha + its bytes at RATE (about one frame: 64 KiB
#    in 510 us, 1 MiB in 8,531), tbf with a peak bucket of two frames 92-193 us less (478 us,
#    8,374), tbf with one 0.8x the rate (623 us, 9,933). htb lets a message's first frames
#    through at once and then holds the link until the rate has paid for them (a capture of
#    ring on 2 x 2: a 64 KiB message's seven full frames within 4 us, its last frame about
#    450 us later), so a message completes at its rate and what follows it on the link waits,
#    as on a FIFO link. htb's queue is the veth's (txqueuelen 1000 frames).
#  - latency sets the queue: limit = RATE x latency + burst. A queue that overflows drops, and a
#    lost segment can cost TCP a 200 ms retransmission timeout, which would swamp a collective.
#    Three hosts sending into one (incast, as several hosts' steps can do with HOSTS >= 3)
#    dropped ~1800 packets at 2ms, 9 at 10ms, none at 50ms; aggregate throughput was the line
#    rate in all three. The queue delays packets only while senders outrun the link.
shape=()
frames="${FRAMES:-gso}"
[[ "$frames" == whole || "$frames" == gso ]] || die "FRAMES must be whole or gso"
mtu="${MTU:-$([[ "$frames" == whole ]] && echo 9000 || echo 1500)}"
[[ "$mtu" =~ ^[1-9][0-9]*$ && "$mtu" -ge 1280 && "$mtu" -le 65535 ]] ||
  die "MTU must be an integer in 1280..65535"
if [[ "$frames" == whole ]]; then
  command -v ethtool >/dev/null || skip "FRAMES=whole needs ethtool (apt-get install ethtool)"
fi
[[ -z "${TBF_PEAK_FRAMES:-}" || -n "${TBF_PEAKRATE:-}" ]] ||
  die "TBF_PEAK_FRAMES sizes TBF_PEAKRATE's bucket: set TBF_PEAKRATE (and RATE) as well"
shaper="${SHAPER:-tbf}"
[[ "$shaper" == tbf || "$shaper" == htb ]] || die "SHAPER must be tbf or htb"
if [[ "$shaper" == htb ]]; then
  [[ -n "$rate" ]] || die "SHAPER=htb shapes at RATE: set RATE as well"
  [[ "$frames" == whole ]] ||
    die "SHAPER=htb needs FRAMES=whole (its one-frame buckets would split 64 KiB GSO packets)"
  for v in TBF_BURST TBF_LATENCY TBF_PEAKRATE TBF_PEAK_FRAMES; do
    [[ -z "${!v:-}" ]] || die "$v sets tbf: not with SHAPER=htb (HTB_BURST sets htb's buckets)"
  done
elif [[ -n "${HTB_BURST:-}" ]]; then
  die "HTB_BURST sets htb's buckets: set SHAPER=htb (and RATE) as well"
fi
if [[ -n "$rate" ]]; then
  bits="$(rate_bits "$rate")" || die "RATE '$rate' is not a tc rate such as 1gbit, 100mbit, 10gbit"
fi
if [[ -n "$rate" && "$shaper" == htb ]]; then
  hburst="${HTB_BURST:-$((mtu + 64))}"
  # The class's arguments; each link's root qdisc is `htb default 1`, its class 1:1 these.
  shape=(htb rate "$rate" ceil "$rate" burst "$hburst" cburst "$hburst" quantum $((mtu + 64)))
elif [[ -n "$rate" ]]; then
  if [[ "$frames" == whole ]]; then
    burst="${TBF_BURST:-32768}"
  else
    burst="${TBF_BURST:-$(((bits / 8 / 500) > 262144 ? bits / 8 / 500 : 262144))}"
  fi
  shape=(tbf rate "$rate" burst "$burst" latency "${TBF_LATENCY:-50ms}")
  if [[ -n "${TBF_PEAKRATE:-}" ]]; then
    peak="$(rate_bits "$TBF_PEAKRATE")" || die "TBF_PEAKRATE '$TBF_PEAKRATE' is not a tc rate"
    ((peak > bits)) || die "TBF_PEAKRATE must be above RATE"
    peak_frames="${TBF_PEAK_FRAMES:-2}"
    [[ "$peak_frames" =~ ^[1-9][0-9]*$ ]] ||
      die "TBF_PEAK_FRAMES must be a whole number of frames, 1 or more"
    shape+=(peakrate "$TBF_PEAKRATE" mtu $((peak_frames * mtu + 64)))
  fi
fi

command -v ip >/dev/null || skip "iproute2's ip is not installed"
[[ $(id -u) == 0 ]] || skip "creating network namespaces needs root"
[[ -z "$rate" ]] || command -v tc >/dev/null || skip "RATE needs tc (iproute2)"

# ---- what gets removed on exit --------------------------------------------------------------
tag="tch$$" # namespaces ${tag}br, ${tag}h0..; our processes are the ones inside them
made=()
pids=() # the ranks of the run under way (ip netns exec ... as started)
work="$(mktemp -d)"
out=""
# shellcheck disable=SC2317 # (run by the trap)
cleanup() {
  local ns i left
  trap - EXIT INT TERM HUP
  exec 2>/dev/null # bash would report each rank it killed here
  # SIGTERM to each rank's `timeout`, which passes it on and reaps its rank; then, until every
  # process in our namespaces is gone, SIGKILL to what is left after 2 s (at most 6 s in all).
  ((${#pids[@]} == 0)) || kill -TERM "${pids[@]}" || true
  for ((i = 0; i < 60; i++)); do
    left=()
    for ns in "${made[@]}"; do mapfile -t -O "${#left[@]}" left < <(ip netns pids "$ns"); done
    ((${#left[@]})) || break
    ((i < 20)) || kill -9 "${left[@]}" || true
    sleep 0.1
  done
  ((${#pids[@]} == 0)) || wait "${pids[@]}" || true
  for ns in "${made[@]}"; do ip netns del "$ns" || true; done
  rm -rf "$work"
  [[ -n "${OUT:-}" || -z "$out" ]] || rmdir "$out" 2>/dev/null || true # our OUT, if nothing ran
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# A snapshot of the binaries: the build tree may be rebuilt while this runs.
cp "$bin_dir/tutti-bench" "$bin_dir/tutti-bench-gloo" "$work/"
[[ -z "$price" ]] || cp "$bin_dir/model-scaling" "$work/"
bin="$work/tutti-bench"
peer="$work/tutti-bench-gloo"
# The names a program's --help lists after "--OPTION NAME one of:", one line, space-separated.
names_of() {
  "$1" --help 2>&1 | sed -n "s/^ *--$2  *NAME  *one of: *\([^[]*[^[ ]\).*/\1/p" | tr -s ' '
}
ours="$(names_of "$bin" algo) automatic_tcp"
theirs="$(names_of "$peer" algo)"
transports="$(names_of "$bin" transport)"
[[ " $transports " == *" gloo "* ]] ||
  die "'$bin_dir/tutti-bench' was built without Gloo (-DTUTTI_WITH_GLOO=ON)"
for a in "${algos[@]}"; do
  if [[ "$a" == gloo_* ]]; then
    [[ " $theirs " == *" ${a#gloo_} "* ]] ||
      die "ALGOS: '$a': tutti-bench-gloo's algorithms are $theirs (as gloo_NAME)"
    [[ "$collective" != reduce_scatter ]] || die "$a: Gloo has no reduce_scatter"
    [[ "$collective" != all_gather || "$a" == gloo_ring ]] ||
      die "$a: Gloo's all_gather is one ring: gloo_ring"
  elif [[ "$a" == torch_* ]]; then
    [[ "$a" =~ ^torch_(gloo|tutti(@(shm|gloo|cluster))?)$ ]] ||
      die "ALGOS: '$a': the torch entries are torch_gloo, torch_tutti and torch_tutti@T (T: shm, gloo, cluster)"
    [[ -n "${torch_ok:-}" ]] || "$torch_py" -c 'import torch, tutti_torch' 2>/dev/null ||
      die "ALGOS: '$a' needs TORCH_PY ('$torch_py') to import torch and tutti_torch (scripts/lib.sh: tutti_torch_venv)"
    torch_ok=1 # importing torch takes seconds: once for every torch entry
  else
    [[ " $ours " == *" ${a%%@*} "* ]] || die "ALGOS: '$a': tutti-bench's algorithms are $ours"
    [[ "$a" != *@* || " $transports " == *" ${a#*@} "* ]] ||
      die "ALGOS: '$a': tutti-bench's transports are $transports"
  fi
done

out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/compare_hosts.XXXXXX")}"
mkdir -p "$out" || die "cannot create OUT '$out'"
out="$(cd "$out" && pwd)"

# ---- the hosts --------------------------------------------------------------------------------
br="${tag}br"
ip netns add "$br" 2>/dev/null || skip "cannot create network namespaces here ('ip netns add' failed)"
made+=("$br")
ip -n "$br" link add br0 type bridge 2>/dev/null || skip "cannot create a bridge in a namespace"
ip -n "$br" link set br0 up
addr_of() { printf '10.79.0.%d' "$(($1 + 1))"; }
for ((h = 0; h < hosts; h++)); do
  ns="${tag}h$h"
  ip netns add "$ns"
  made+=("$ns")
  ip link add "${tag}v$h" netns "$ns" type veth peer name "p$h" netns "$br"
  ip -n "$ns" link set "${tag}v$h" name eth0
  ip -n "$ns" link set eth0 mtu "$mtu"
  ip -n "$br" link set "p$h" mtu "$mtu"
  if [[ "$frames" == whole ]]; then
    ip netns exec "$ns" ethtool -K eth0 gso off tso off gro off >/dev/null 2>&1 ||
      skip "cannot turn segmentation offloads off ('ethtool -K eth0 gso off tso off gro off')"
    ip netns exec "$br" ethtool -K "p$h" gso off tso off gro off >/dev/null 2>&1 ||
      skip "cannot turn segmentation offloads off on the bridge's end of a link"
  fi
  ip -n "$ns" addr add "$(addr_of "$h")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$br" link set "p$h" master br0
  ip -n "$br" link set "p$h" up
  if [[ -n "${SLOW_START_AFTER_IDLE:-}" ]]; then
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_slow_start_after_idle="$SLOW_START_AFTER_IDLE"
  fi
  if [[ -n "${TCP_CC:-}" ]]; then
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$TCP_CC" ||
      die "TCP_CC=$TCP_CC: refused; a namespace may pick one of net.ipv4.tcp_allowed_congestion_control" \
        "($(sysctl -n net.ipv4.tcp_allowed_congestion_control)), which root sets for the machine"
  fi
  if [[ "$shaper" == htb && ${#shape[@]} -gt 0 ]]; then
    for link in "$ns eth0" "$br p$h"; do
      read -r lns dev <<<"$link"
      ip netns exec "$lns" tc qdisc add dev "$dev" root handle 1: htb default 1 2>/dev/null ||
        skip "cannot shape a link: 'tc qdisc add ... htb' failed (no htb in this kernel?)"
      ip netns exec "$lns" tc class add dev "$dev" parent 1: classid 1:1 "${shape[@]}" ||
        die "tc refused the htb class: ${shape[*]}"
    done
  elif ((${#shape[@]})); then
    ip netns exec "$ns" tc qdisc add dev eth0 root "${shape[@]}" 2>/dev/null ||
      skip "cannot shape a link: 'tc qdisc add ... ${shape[*]}' failed (no tbf in this kernel?)"
    ip netns exec "$br" tc qdisc add dev "p$h" root "${shape[@]}"
  fi
done

# Starts one run's ranks, each in its host's namespace with a launcher's variables, rank 0's
# stdout to $out/$1.csv; 0 if every rank exited 0, else 1 with what went wrong in $work/why.
run_world() {
  local name="$1" port=$((20000 + RANDOM % 40000)) h r k rc=0 st
  pids=()
  : >"$work/why"
  shift
  for ((h = 0; h < hosts; h++)); do
    for ((r = 0; r < rph; r++)); do
      k=$((h * rph + r))
      ip netns exec "${tag}h$h" env RANK=$k WORLD_SIZE=$((hosts * rph)) LOCAL_RANK=$r \
        LOCAL_WORLD_SIZE="$rph" MASTER_ADDR="$(addr_of 0)" MASTER_PORT=$port \
        CPU_TIMES="$work/cpu.$k" "${cpu_times[@]}" \
        timeout "$run_timeout" "${prio[@]}" "$@" >"$work/out.$k" 2>"$out/$name.rank$k.err" &
      pids+=($!)
    done
  done
  for ((k = 0; k < ${#pids[@]}; k++)); do
    st=0
    wait "${pids[$k]}" 2>/dev/null || st=$? # (no "Killed" line from bash)
    if ((st != 0)); then
      ((st == 124)) && st="$st (RUN_TIMEOUT)"
      # what it said, less the progress lines and the usage text after a usage error
      echo "    rank $k exited with $st" >>"$work/why"
      tr '\r' '\n' <"$out/$name.rank$k.err" | grep -v -e '^\[tutti-bench\]' -e '^ *$' |
        sed -n '1,3s/^/    | /p' >>"$work/why" || true
      rc=1
    fi
  done
  mv "$work/out.0" "$out/$name.csv"
  if ((${#cpu_times[@]})); then # "RANK USER SYS" in seconds, from the children line of `times`
    for ((k = 0; k < ${#pids[@]}; k++)); do
      sed -n '2s/^\([0-9]*\)m\([0-9.]*\)s \([0-9]*\)m\([0-9.]*\)s$/\1 \2 \3 \4/p' "$work/cpu.$k" |
        awk -v k="$k" '{ printf "%d %.3f %.3f\n", k, $1 * 60 + $2, $3 * 60 + $4 }'
    done >"$out/$name.cpu"
  fi
  for ((k = 0; k < ${#pids[@]}; k++)); do
    [[ -s "$out/$name.rank$k.err" ]] || rm -f "$out/$name.rank$k.err"
  done
  pids=()
  return $rc
}

# CPU=1: each rank runs under a bash that writes its `times` (the rank's own CPU) at the end.
cpu_times=()
[[ -z "$cpu" ]] || cpu_times=(bash -c '"$@"; rc=$?; times >"$CPU_TIMES"; exit $rc' cpu_times)

np=$((hosts * rph))
model="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
notes=()  # what runs otherwise than PLACEMENT says: all_reduce's in-place-only entries
[[ "$collective" != all_reduce ]] || notes+=("Gloo's ring_chunked and halving_doubling: in place")
if [[ " ${algos[*]}" == *" torch_"* ]]; then
  torch_version="$("$torch_py" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
  torch_placement="$([[ "$collective" == all_reduce ]] && echo "in place" || echo "out of place")"
  notes+=("torch_*: torch.distributed through bench/torch/allreduce.py --launched, $torch_placement, $torch_version")
fi
placement_notes=""
for note in "${notes[@]}"; do placement_notes+="${placement_notes:+; }$note"; done
[[ -z "$placement_notes" ]] || placement_notes="($placement_notes); "
{
  echo "# $collective across $hosts simulated hosts x $rph ranks per host: tutti over Gloo's TCP transport vs Gloo's own algorithms, float sum"
  echo
  echo "- date: $(date '+%Y-%m-%d %H:%M:%S %Z')"
  echo "- machine: ${model:-unknown CPU}, $(nproc) cores, $(uname -srm);" \
    "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
  echo "- Gloo: Debian libgloo-dev $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || echo '?')"
  echo "- hosts: $hosts network namespaces on one bridge (veth), $rph ranks each ($np in all);" \
    "links: $( ((${#shape[@]})) && echo "tc ${shape[*]} (bytes$([[ "$shaper" == htb ]] && echo ", one class")), each direction" || echo unshaped)," \
    "MTU $mtu, $([[ "$frames" == whole ]] && echo "whole frames (offloads off)" || echo "GSO packets")," \
    "TCP congestion control $(ip netns exec "${tag}h0" sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo '?')"
  echo "- tutti-bench --transport gloo (A@T: --transport T) / tutti-bench-gloo $collective --algo A -b $minbytes -e $maxbytes -a 3 --csv --placement $placement" \
    "${iters:+-n $iters }$placement_notes$stat of $rounds interleaved runs${PRIO:+, under chrt -f $PRIO}"
  echo "- raw output: $out"
  echo
} | tee "$out/summary.md"

failed=0
for ((round = 1; round <= rounds; round++)); do
  for a in "${algos[@]}"; do
    printf '  round %s %-22s ... ' "$round" "$a" >&2
    start=$SECONDS
    if [[ "$a" == gloo_* ]]; then
      cmd=("$peer" "$collective" --algo "${a#gloo_}")
      # ring and bcube have both forms; the classic classes only in place
      [[ "$a" == gloo_ring || "$a" == gloo_bcube ]] && cmd+=(--placement "$placement")
    elif [[ "$a" == torch_* ]]; then
      # torch's gloo finds its interface by name (the namespace's host name resolves to
      # loopback); tutti_torch by the route to MASTER_ADDR
      cmd=(env GLOO_SOCKET_IFNAME=eth0)
      [[ "$a" != *@* ]] || cmd+=(TUTTI_TORCH_TRANSPORT="${a#*@}")
      be="${a#torch_}"
      cmd+=("$torch_py" "$repo/bench/torch/allreduce.py" --launched --backend "${be%%@*}"
        --collective "$collective")
    else
      name="${a%%@*}" transport=gloo
      [[ "$a" != *@* ]] || transport="${a#*@}"
      cmd=()
      # automatic_tcp: automatic with every message on Gloo's TCP pairs, as Gloo's own have them
      [[ "$name" != automatic_tcp ]] || { name=automatic cmd=(env TUTTI_GLOO_CMA=0); }
      cmd+=("$bin" "$collective" --transport "$transport" --algo "$name" --placement "$placement")
    fi
    [[ -z "$iters" ]] || cmd+=(-n "$iters")
    if run_world "$a.r$round" "${cmd[@]}" -b "$minbytes" -e "$maxbytes" -a 3 --csv --json "$out/$a.r$round.json"; then
      printf 'ok (%ss)\n' "$((SECONDS - start))" >&2
    else
      failed=1
      printf 'FAILED (%ss)\n' "$((SECONDS - start))" >&2
      cat "$work/why" >&2
    fi
  done
done

{
  echo "- load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
  echo
  echo "## $hosts hosts x $rph ranks per host${rate:+, $rate links}: time per call (µs), $stat of $rounds"
  echo
} | tee -a "$out/summary.md"
calls="${cpu:+$((iters + 5))}" # CPU=1: the calls each run makes (tutti-bench's 5 warm-up ones)
python3 - "$repo/bench" "$out" "$stat" "$calls" "$collective" "${algos[@]}" <<'PY' | tee -a "$out/summary.md" || failed=1
import glob, statistics, sys
sys.path.insert(0, sys.argv[1])
import runstats
out, stat, calls, collective, algos = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
FLAT = ("ring", "tree", "recursive_halving", "recursive_doubling", "bruck", "direct")
base = lambda a: a.split("@")[0]
runs = runstats.Runs()
for a in algos:
    runs.add_all(a, f"{out}/{a}.r*.csv")
wrong = [f"{f}: {n} wrong elements at {size} B" for (_, f, size, n) in runs.wrong]
best = runs.stat(stat)  # the statistic STAT names
sizes = runs.sizes()
gloo = [a for a in algos if a.startswith("gloo_")]
flat = [a for a in algos if base(a) in FLAT]
others = [a for a in algos if base(a) not in FLAT and not a.startswith(("gloo_", "torch_"))
          and base(a) != "native"]
# through torch.distributed: tutti's entries next to torch's own gloo backend
torch_ours = [a for a in algos if a.startswith("torch_tutti")] if "torch_gloo" in algos else []

def fastest(names, s):
    return min(((best[(a, s)], a) for a in names if (a, s) in best), default=None)

both = bool(flat or gloo)  # the best of each side, unless only torch_* and the like ran
heads = list(algos) + (["best flat", "best Gloo", "best flat / best Gloo"] if both else [])
heads += [f"{a} / best Gloo" for a in others] + [f"{a} / torch_gloo" for a in torch_ours]
print("| bytes | " + " | ".join(heads) + " |")
print("|---:|" + "---:|" * len(algos) + ("---|---|---:|" if both else "")
      + "---:|" * (len(others) + len(torch_ours)))
slower, short = [], []
for s in sizes:
    cells = [f"{best[(a, s)]:.1f}" if (a, s) in best else "–" for a in algos]
    f, g = fastest(flat, s), fastest(gloo, s)
    ratio = lambda t: f"{t / g[0]:.2f}" if g and t is not None else "–"
    if both:
        cells += [f[1] if f else "–", g[1] if g else "–", ratio(f[0] if f else None)]
    cells += [ratio(best.get((a, s))) for a in others]
    tg = best.get(("torch_gloo", s))
    cells += [f"{best[(a, s)] / tg:.2f}" if tg and (a, s) in best else "–" for a in torch_ours]
    print(f"| {s} | " + " | ".join(cells) + " |")
    if f and g:
        if f[0] > g[0]:
            slower.append(f"{s} ({f[0] / g[0]:.2f})")
        if s >= 1 << 20 and g[0] / f[0] < 1.3:
            short.append(f"{s} ({g[0] / f[0]:.2f}x)")
print()
if flat and gloo and collective == "all_reduce":  # the targets are all_reduce's
    print("- ratios are times (< 1: tutti is faster); target: best flat <= best Gloo at every size, "
          "and >= 1.3x faster (ratio <= 0.77) from 1 MiB")
    print("- best flat slower than best Gloo at: " + (", ".join(slower) or "no size"))
    print("- best flat < 1.3x faster than best Gloo from 1 MiB at: " + (", ".join(short) or "no size"))
    print()
if calls:  # CPU=1: each run's CPU over all ranks, per call; the median over the rounds
    print(f"## CPU per call (µs, all ranks together, median of the rounds; {calls} calls per run)")
    print()
    print("| algorithm | user | system | system share |")
    print("|---|---:|---:|---:|")
    for a in algos:
        per_run = []
        for f in sorted(glob.glob(f"{out}/{a}.r*.cpu")):
            rows = [line.split() for line in open(f) if line.strip()]
            per_run.append((sum(float(r[1]) for r in rows), sum(float(r[2]) for r in rows)))
        if per_run:
            u = statistics.median(r[0] for r in per_run) * 1e6 / int(calls)
            y = statistics.median(r[1] for r in per_run) * 1e6 / int(calls)
            print(f"| {a} | {u:.1f} | {y:.1f} | {y / (u + y):.2f} |" if u + y > 0 else f"| {a} | 0 | 0 | – |")
    print()
for w in wrong:
    print(f"- WRONG: {w}")
sys.exit(1 if wrong else 0)
PY
if [[ -n "$price" ]]; then
  python3 - "$repo/bench" "$out" "$stat" "$collective" "$hosts" "$rph" "$np" "$(nproc)" \
    "$work/model-scaling" "${algos[@]}" <<'PY' | tee -a "$out/summary.md" || failed=1
# The model next to the measurement: model-scaling --format csv with the link automatic saw.
import glob, os, re, statistics, subprocess, sys
sys.path.insert(0, sys.argv[1])
import runstats
out, stat, collective = sys.argv[2], sys.argv[3], sys.argv[4]
hosts, rph, np_, cpus = map(int, sys.argv[5:9])
model_bin, algos = sys.argv[9], sys.argv[10:]
runs = runstats.Runs()
for a in algos:
    runs.add_all(a, f"{out}/{a}.r*.csv")
best, sizes = runs.stat(stat), runs.sizes()
# What automatic used in each world (rank 0's log): the probe's figures or the overrides.
used = re.compile(r"automatic uses ([0-9.e+-]+) Gbit/s, ([0-9.e+-]+) us")
crowd = re.compile(r"([0-9.]+) ranks per CPU on the most crowded one")
links, per_cpu = [], []
for f in sorted(glob.glob(f"{out}/*.rank0.err")):
    text = open(f, errors="replace").read()
    links += [(float(g), float(a)) for g, a in used.findall(text)]
    per_cpu += [float(r) for r in crowd.findall(text)]
# With both overrides set no world probes, and the logs say nothing of the link.
env_g, env_a = os.environ.get("TUTTI_LINK_GBPS"), os.environ.get("TUTTI_LINK_ALPHA_US")
print("## The α-β-γ model next to the measurement")
print()
if links:
    gbps = statistics.median(g for g, _ in links)
    alpha = statistics.median(a for _, a in links)
    src = (f"the median of {len(links)} worlds' figures at join (α "
           f"{min(a for _, a in links):.4g}–{max(a for _, a in links):.4g} µs)")
elif env_g and env_a:
    gbps, alpha, src = float(env_g), float(env_a), "TUTTI_LINK_GBPS / TUTTI_LINK_ALPHA_US"
else:
    print("- no link figures in the runs' logs (rank 0 prints them with TUTTI_DEBUG=info, on a "
          "tutti run over gloo or cluster): nothing priced")
    print()
    sys.exit(0)
r = statistics.median(per_cpu) if per_cpu else np_ / cpus
r = r if r > 1 else 0.0  # 0: a CPU per rank, as automatic takes it
base = ["--format", "csv", "--link-gbps", f"{gbps:.6g}", "--link-alpha-us", f"{alpha:.6g}",
        "--shapes", f"{hosts}x{rph}", "--ranks-per-cpu", f"{r:g}", "--collective", collective,
        "--sizes", ",".join(map(str, sizes))]
print(f"- link: {gbps:.4g} Gbit/s, α {alpha:.4g} µs, {src}; ranks per CPU: {r:g} (0: one CPU each)")
# Entries on gloo are priced as a flat gloo world; NAME@cluster as tutti::cluster (shm inside).
groups = {"gloo": [a for a in algos if "@" not in a and not a.startswith(("gloo_", "torch_"))],
          "shm": [a for a in algos if a.endswith("@cluster")]}
table, picks = {}, {}
for inside, entries in groups.items():
    if not entries:
        continue
    cmd = [model_bin, "--inside", inside] + base
    print(f"- `{' '.join(['model-scaling'] + cmd[1:])}`" + (" (NAME@cluster)" if inside == "shm" else ""))
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"- model-scaling failed: {res.stderr.strip()}")
        sys.exit(1)
    suffix = "" if inside == "gloo" else "@cluster"
    for line in res.stdout.splitlines()[1:]:
        c, h, l, n, policy, us, pick = line.split(",")
        table[(policy + suffix, int(n))] = float(us)
        picks[("automatic" + suffix, int(n))] = pick + suffix
priced = [a for a in algos if any(k[0] == a for k in table)]
autos = [a for a in algos if any(k[0] == a for k in picks)]
print("- cells: predicted µs (predicted / measured); automatic: the policy the model picks, and "
      "that policy's measured time / the fastest priced policy's on the same transport")
print()
heads = priced + [f"{a} picks" for a in autos]
print("| bytes | " + " | ".join(heads) + " |")
print("|---:|" + "---:|" * len(priced) + "---|" * len(autos))
for n in sizes:
    cells = []
    for a in priced:
        p, m = table.get((a, n)), best.get((a, n))
        cells.append(f"{p:,.0f} ({p / m:.2f})" if p is not None and m else "–")
    for a in autos:
        pick = picks[(a, n)]
        same = [x for x in priced if x.endswith("@cluster") == a.endswith("@cluster")]
        fast = min((best[(x, n)] for x in same if (x, n) in best), default=None)
        mp = best.get((pick, n))
        cells.append(f"{pick} ({mp / fast:.2f})" if mp and fast else pick)
    print(f"| {n} | " + " | ".join(cells) + " |")
print()
PY
fi
echo "raw output: $out" >&2
exit "$failed"
