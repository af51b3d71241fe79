"""The warm-up compiles every kernel variant a served run launches: checked without a GPU by
planning each call as the Triton kernels would launch it on an H100 and keying it as Triton
keys its compiled kernels (`kernels.triton_compile.variant_key`). Served: vanilla with and
without chunked prefill (prompts up to 2,000 tokens: split-KV), a model with a 1,700-token
sliding window, speculative chains and trees, lookahead, and APAR (copy-on-write), at odd and
even batch sizes. Runs the driver in a process without Triton's interpreter, whose launcher
would key calls differently."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("needs torch and triton", allow_module_level=True)

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_served_runs_launch_no_variant_the_warm_up_missed() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's default, set to silence its warning
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), str(TESTS)])
    done = subprocess.run(
        [sys.executable, str(TESTS / "warm_up_variants_driver.py")],
        cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["served"] >= 12  # many variants served: the check has something to check
    assert result["split_variants_served"] >= 1  # long prompts took the split-KV path
    assert result["missed"] == []
