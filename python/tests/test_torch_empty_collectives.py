"""moecomm.torch's collectives with no rows on any member complete on every rank with an
empty result (gloo's AllGather of empty blocks died with SIGFPE)."""
from __future__ import annotations

from conftest import require

require("torch")

import torch_empty_collectives  # noqa: E402


def test_empty_collectives_complete_with_empty_rows(tmp_path):
    results = torch_empty_collectives.run_all(str(tmp_path))
    for rank, got in enumerate(results):
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        for name, shape in got["shapes"].items():
            assert shape == [0, *torch_empty_collectives.COLS], f"rank {rank} {name}: {shape}"
        assert got["after"] == [0.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]
