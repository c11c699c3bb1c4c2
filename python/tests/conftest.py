"""Shared fixtures: a NetMoE placement instance with locality, and the CLI binary (when the
build has it) to compare error messages with."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("MOECOMM_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def locality_counts(samples: int, experts: int, devices: int, tokens: int = 2048,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Counts with NetMoE's data locality (Sec. 1): each sample sends about half its tokens
    to the experts of one device; experts sit in equal contiguous blocks."""
    rng = np.random.default_rng(seed)
    per_device = experts // devices
    expert_device = np.repeat(np.arange(devices), per_device).astype(np.int64)
    num = np.zeros((samples, experts), dtype=np.int64)
    for i in range(samples):
        home = rng.integers(devices)
        local = int(rng.uniform(0.3, 0.7) * tokens)
        num[i] += np.bincount(rng.integers(home * per_device, (home + 1) * per_device, local),
                              minlength=experts)
        num[i] += np.bincount(rng.integers(0, experts, tokens - local), minlength=experts)
    return num, expert_device


@pytest.fixture
def netmoe_instance() -> tuple[np.ndarray, np.ndarray, int]:
    """I = 128 samples, E = 64 experts on 4 nodes x 8 devices (NetMoE Table 3's shape)."""
    num, expert_device = locality_counts(128, 64, 32)
    return num, expert_device, 8


def cli_error(*args: str) -> Optional[str]:
    """The message after "error: " that the moecomm binary prints, or None without it."""
    binary = os.environ.get("MOECOMM_BINARY", "")
    if not binary or not os.path.exists(binary):
        return None
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("error: ")][0]
    return line[len("error: "):]
