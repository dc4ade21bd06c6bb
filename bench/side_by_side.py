"""Whether two processes doing vector work at once each keep their speed: a benchmark of the machine, not of
pyengine (bench/PROFILE.md reads it beside two workers' decode).

    python bench/side_by_side.py

Runs, alone then two at once: a float32 256x256 matrix product in cache (numpy's BLAS on one thread), 3000
times, and a float32 sum over 64 MB, 40 times. Prints each run's seconds. Two cores of their own give the same
seconds side by side; two hyperthreads of one core about twice as many.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"


def work() -> dict:
    import numpy as np
    a = np.random.default_rng(0).random((256, 256), np.float32)
    t0 = time.perf_counter()
    for _ in range(3000):
        a @ a
    t1 = time.perf_counter()
    x = np.random.default_rng(1).random(64 * 2**20 // 4, np.float32)
    t2 = time.perf_counter()
    for _ in range(40):
        x.sum()
    return {"sgemm_s": round(t1 - t0, 2), "sum_64mb_s": round(time.perf_counter() - t2, 2)}


def main() -> None:
    if sys.argv[1:] == ["--work"]:
        print(work())
        return
    me = [sys.executable, __file__, "--work"]
    print("alone:", subprocess.run(me, capture_output=True, text=True, check=True).stdout.strip())
    two = [subprocess.Popen(me, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    print("side by side:", *(p.communicate()[0].strip() for p in two))


if __name__ == "__main__":
    main()
