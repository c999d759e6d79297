"""Where an eager mode's memory goes on the GPT training step of benchmarks/run.py.

    python benchmarks/mode_memory.py [--modes strict fused compile]

Each mode in its own process with an empty compile cache: 6 warm-up steps, background compiles
finished, 3 more steps; then the resident memory (VmRSS), the same after malloc_trim(0) (what of it
is free heap glibc kept), and the temporaries XLA planned for the programs the run compiled
(torchtpu.cache.stats()["compiles"]).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import ctypes, json, sys
sys.path.insert(0, {here!r})
import torchtpu, run
step = run.torch_workload("gpt_train", run.GPT_FULL, "torchtpu-" + {mode!r})
for _ in range(6):
    step(0)
torchtpu.cache.wait_for_background_compiles()
for _ in range(3):
    step(0)

def rss_mb():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmRSS"))
    return int(line.split()[1]) / 1024

steady = rss_mb()
ctypes.CDLL("libc.so.6").malloc_trim(0)
compiles = torchtpu.cache.stats()["compiles"]
largest = max(compiles, key=lambda c: c[2])
print(json.dumps({{"steady_mb": steady, "trimmed_mb": rss_mb(), "programs": len(compiles),
                  "temp_mib": sum(max(c[2], 0) for c in compiles) / 2**20,
                  "largest_temp_mib": largest[2] / 2**20, "largest": largest[0][:60]}}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["strict", "fused", "compile"])
    args = parser.parse_args()
    print("| mode | steady RSS MB | after malloc_trim MB | programs | their temporaries MiB | largest (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for mode in args.modes:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_CACHE_DIR=cache)
            out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, mode=mode)], env=env,
                                 capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| {mode} | {r['steady_mb']:,.0f} | {r['trimmed_mb']:,.0f} | {r['programs']} | {r['temp_mib']:.1f} "
              f"| {r['largest_temp_mib']:.1f} ({r['largest']}) |")


if __name__ == "__main__":
    main()
