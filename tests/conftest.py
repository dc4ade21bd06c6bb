"""Shared test fixtures: paths to the tiny fixture models and the real models.

Real-model tests skip when ``models/`` has not been fetched, except under CI
(``CI=true``), where a missing model is a failure: ``make test`` fetches them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden"
MODELS = ROOT / "models"

GEMMA3 = MODELS / "gemma-3-270m-q4_k_m.gguf"
SMOLLM2 = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = {name: FIXTURES / f"tiny-{name}.gguf" for name in ("llama", "llama-q4km", "qwen2", "qwen3", "gemma3")}


def _need(path: Path) -> Path:
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: run build_scripts/fetch_models.py")
        pytest.skip(f"{path.name} not fetched (python build_scripts/fetch_models.py)")
    return path


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return _need(GEMMA3)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _need(SMOLLM2)


@pytest.fixture(scope="session")
def fixtures_reference() -> dict:
    return json.loads((FIXTURES / "fixtures-reference.json").read_text())


@pytest.fixture(scope="session")
def q8_qwen2(tmp_path_factory) -> Path:
    """tiny-qwen2 with its matrices in Q8_0 (gguf-py's quantizer): a quantized model whose heads and
    FFN units can be cut over workers."""
    from gguf_write import quantized_copy
    path = tmp_path_factory.mktemp("q8") / "tiny-qwen2-q8_0.gguf"
    quantized_copy(TINY["qwen2"], path)
    return path


def need_kernel():
    """Skip a test of the C kernel where it is not built, except under CI, where that fails (make build)."""
    from pyengine.weights import kernel
    if kernel.get() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the C kernel is not there: {kernel.status()}")
        pytest.skip(f"the C kernel is not there: {kernel.status()}")


@pytest.fixture
def numpy_products():
    """The quantized products in numpy's forms for one test, the C kernel set aside (as PYENGINE_KERNELS=0)."""
    from pyengine.weights import kernel
    kernel.use(False, "a test asked for numpy's forms")
    yield
    kernel.use(True)


@pytest.fixture(params=["kernel", "numpy"])
def products(request):
    """Each test run twice: with the C kernel's products (skipped where it is not built) and with numpy's."""
    from pyengine.weights import kernel
    if request.param == "kernel":
        need_kernel()
    if request.param == "numpy":
        kernel.use(False, "a test asked for numpy's forms")
    yield request.param
    kernel.use(True)
