"""Runs of tutti-bench and its peers, gathered per name and size, for bench/compare_gloo.sh,
bench/compare_mpi.sh and bench/netns/compare_hosts.sh.

Each run is a --csv file (rows impl,ranks,bytes,time_us,algbw,busbw,wrong; other lines are
skipped). A name's statistic over its runs is STATS[stat] of its times per size: best, the
lowest; median, the middle of the sorted times (the mean of the two middle ones for an even
count), which a program that is fast only now and then does not win.
"""

import csv
import glob
import statistics

STATS = {"best": min, "median": statistics.median}


class Runs:
    """Times per (name, size) over every run added, and the rows that reported wrong elements."""

    def __init__(self):
        self.times = {}  # (name, size) -> [time_us, ...], one per run
        self.work = {}  # (name, size) -> busbw x time_us: the same for every run of a size
        self.wrong = []  # (name, path, size, wrong elements)

    def add(self, name, path):
        with open(path, newline="") as f:
            for row in csv.reader(f):
                if len(row) != 7 or not row[2].isdigit():
                    continue
                size, t = int(row[2]), float(row[3])
                if row[6] not in ("0", ""):
                    self.wrong.append((name, path, size, int(row[6])))
                self.times.setdefault((name, size), []).append(t)
                self.work[(name, size)] = float(row[5]) * t

    def add_all(self, name, pattern):
        """add() every file that the glob `pattern` matches, in name order."""
        for path in sorted(glob.glob(pattern)):
            self.add(name, path)

    def stat(self, stat):
        """{(name, size): the statistic `stat` names of its times}."""
        pick = STATS[stat]
        return {k: pick(v) for k, v in self.times.items()}

    def busbw(self, key, time_us):
        """The bus bandwidth (GB/s) of a call of `key` that takes `time_us`."""
        return self.work[key] / time_us if time_us > 0 else 0.0

    def sizes(self):
        return sorted({s for (_, s) in self.times})
