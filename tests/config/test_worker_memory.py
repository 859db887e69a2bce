"""A worker runs under a memory limit, so one task cannot take the machine (issue 34)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def _data_limit(pid: int) -> str:
    lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
    return next(line for line in lines if line.startswith("Max data size")).split()[3]


@pytest.mark.worker
def test_a_real_worker_runs_under_the_configured_data_limit(celery_worker_process):
    assert settings.WORKER_MEMORY_LIMIT_MB == 2048
    assert _data_limit(celery_worker_process.pid) == str(2048 * 1024 * 1024)


def test_an_allocation_beyond_the_limit_is_a_memory_error_not_the_machines_memory():
    code = textwrap.dedent(
        """
        import numpy as np
        from config.celery import limit_memory
        limit_memory(400)
        small = np.ones(20_000_000)  # 160 MB: under the limit
        try:
            np.ones(100_000_000)  # 800 MB
        except MemoryError:
            print("refused")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.strip() == "refused", done.stderr
