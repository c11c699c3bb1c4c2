"""HybridEP with SR compression in moecomm.torch: step 2 (after the shared expert and the
feedback residual moved in step 1) equals the reference of torch_sr_cases.py, which runs each
token with the owner's exact expert or the copy its own SR codec (no moecomm code; checked
against the C++ codec the layer uses) decodes, within 1e-5."""
from __future__ import annotations

import pytest

from conftest import require

require("torch")

import torch_sr_cases  # noqa: E402
from torch_spawn import assert_matches_reference  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return torch_sr_cases.run_all(str(tmp_path_factory.mktemp("torch_sr")))


@pytest.mark.parametrize("case", [c[0] for c in torch_sr_cases.CASES])
def test_compressed_experts_equal_reference(results, case):
    for rank, res in enumerate(results):
        got = res[case]
        assert_matches_reference(got, rank, case)
        # The copies are lossy: the test would not notice exact copies otherwise.
        assert got["copies_differ_by"] > 1e-3
        assert got["codec_agrees"]
