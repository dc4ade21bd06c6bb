import os

# One OpenBLAS thread, set before numpy loads: on 2 busy cores its threads made gemma-3-270m's
# 128-token prefill 3-6x slower (bench/bench_model.py --threads 1 / 2: 109-121 / 21-35 tok/s).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pyengine.cli import main  # noqa: E402

raise SystemExit(main())
