import os

# One OpenBLAS thread, set before numpy loads: on busy cores its threads slow a prefill down
# (bench/bench_model.py --threads).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pyengine.cli import main  # noqa: E402

raise SystemExit(main())
