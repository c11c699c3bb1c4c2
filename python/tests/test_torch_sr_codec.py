"""moecomm.torch's SR codec (torch ops on the experts' device) against moecomm's C++ codec
through the _moecomm binding, bit for bit: the encoded bytes (values, indices, their order),
the decoded copies (their float bits, so -0.0 against +0.0 and NaN payloads count), and over
several steps the state SharedResidual keeps (shared expert, feedback residual), against the
host round trip it replaced (sr_host_codec.py). Both selections are checked on the CPU: the
one the CPU runs and the sync-free one a GPU runs; where torch sees a GPU (a CUDA build of
torch), the codec runs there too, equal but for NaN payloads: a GPU's arithmetic makes every
NaN 0x7fffffff, which ranks as x86's NaNs do (above inf) but is other bytes."""
from __future__ import annotations

import math

import pytest

from conftest import require

require("torch")
np = require("numpy")

import torch  # noqa: E402

from moecomm import _moecomm  # noqa: E402
from moecomm.torch import hybrid  # noqa: E402
from sr_host_codec import HostSharedResidual  # noqa: E402

COMPRESSIONS = [0.02, 0.1, 0.3, 0.58, 1.0]
SELECTIONS = {"cpu": hybrid._top_indices, "sync_free": hybrid._top_indices_sync_free}
# (device, selection): the CPU with each selection; a GPU with its own (sync-free).
RUNS = [("cpu", "cpu"), ("cpu", "sync_free")] + (
    [("cuda", "cuda")] if torch.cuda.is_available() else [])


@pytest.fixture(params=RUNS, ids=[f"{d}-{s}" for d, s in RUNS])
def device(request, monkeypatch):
    """Where the torch codec runs (the C++ one on the host, as ever)."""
    dev, selection = request.param
    if dev == "cpu":
        monkeypatch.setattr(hybrid, "_top_indices", SELECTIONS[selection])
    return torch.device(dev)


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def assert_bits_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Float bits equal (a GPU's tensor: NaN payloads aside, see the module docstring)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    if got.is_cuda:
        got, want = got.cpu(), torch.where(want.isnan(), math.nan, want)
        got = torch.where(got.isnan(), math.nan, got)
    differ = (bits(got) != bits(want)).reshape(-1).nonzero()
    if differ.numel():
        i = differ[0, 0].item()
        pytest.fail(f"{what}: {differ.numel()} values differ, first at flat {i}: "
                    f"{got.reshape(-1)[i].item()!r} vs {want.reshape(-1)[i].item()!r}")


def cpp_encode(w: torch.Tensor, ref, k: int) -> torch.Tensor:
    rows = []
    for i in range(w.shape[0]):
        r = np.zeros(0, np.float32) if ref is None else ref.expand_as(w)[i].numpy()
        rows.append(torch.from_numpy(_moecomm.sr_encode(w[i].numpy(), r, k)))
    return torch.stack(rows)


def cpp_decode(enc: torch.Tensor, ref, n: int) -> torch.Tensor:
    rows = []
    for i in range(enc.shape[0]):
        r = np.zeros(0, np.float32) if ref is None else ref.expand(enc.shape[0], n)[i].numpy()
        rows.append(torch.from_numpy(_moecomm.sr_decode(enc[i].numpy(), r, n)))
    return torch.stack(rows)


def assert_encoded_equal(got: torch.Tensor, want: torch.Tensor, k: int, what: str) -> None:
    """The same bytes: indices exactly, values as assert_bits_equal has them."""
    assert got.dtype == torch.uint8 and got.shape == want.shape, (what, got.shape, want.shape)
    assert torch.equal(got[:, 4 * k:].cpu(), want[:, 4 * k:]), f"{what}: indices differ"
    assert_bits_equal(got[:, :4 * k].view(torch.float32), want[:, :4 * k].view(torch.float32),
                      f"{what}: values")


def check_round_trip(w: torch.Tensor, ref, k: int, device: torch.device) -> None:
    on = lambda x: None if x is None else x.to(device)
    want = cpp_encode(w, ref, k)
    got = hybrid.sr_encode(on(w), on(ref), k)
    assert got.device.type == device.type
    assert_encoded_equal(got, want, k, f"encode k={k} of {w.shape}")
    decoded = hybrid.sr_decode(got, on(ref), w.shape[1])
    assert decoded.device.type == device.type
    assert_bits_equal(decoded, cpp_decode(want, ref, w.shape[1]), f"decode k={k} of {w.shape}")


def test_kept_matches_cpp():
    for n in (1, 2, 3, 100, 4097):
        for c in COMPRESSIONS:
            want = max(1, min(n, math.floor(c * n / 2 * (1 + 1e-12))))
            assert _moecomm.sr_kept(n, c) == want


@pytest.mark.parametrize("rows,n", [(1, 1), (1, 2), (3, 7), (2, 64), (4, 512), (1, 4099)])
@pytest.mark.parametrize("reference", ["none", "shared", "per_row"])
def test_random_tensors_equal_cpp(device, rows, n, reference):
    gen = torch.Generator().manual_seed(rows * 1000 + n)
    w = torch.randn(rows, n, generator=gen)
    ref = {"none": None, "shared": torch.randn(n, generator=gen),
           "per_row": torch.randn(rows, n, generator=gen)}[reference]
    ks = sorted({_moecomm.sr_kept(n, c) for c in COMPRESSIONS} | {n})
    for k in ks:
        check_round_trip(w, ref, k, device)


def edge_cases(n: int):
    gen = torch.Generator().manual_seed(n)
    zero = torch.zeros(2, n)
    signed_zero = torch.where(torch.rand(2, n, generator=gen) < 0.5, zero, -zero)
    ties = torch.randint(-2, 3, (3, n), generator=gen).float() * 0.25  # 5 magnitudes, +-
    special = torch.randn(2, n, generator=gen)
    special[0, ::3] = math.inf
    special[1, 1::4] = -math.inf
    special[1, ::5] = math.nan
    return {"all_zero": zero, "signed_zero": signed_zero, "ties": ties, "inf_nan": special}


@pytest.mark.parametrize("n", [1, 2, 5, 40, 1000])
def test_edge_cases_equal_cpp(device, n):
    for name, w in edge_cases(n).items():
        for ref in (None, torch.zeros(n), -torch.zeros(n), torch.full((n,), 0.25)):
            for k in sorted({_moecomm.sr_kept(n, c) for c in COMPRESSIONS} | {n}):
                check_round_trip(w, ref, k, device)


def test_ties_go_to_the_lower_index(device):
    w = torch.tensor([[1.0, -2.0, 2.0, -1.0, 2.0, 0.5]], device=device)
    enc = hybrid.sr_encode(w, None, 3).cpu()
    assert enc[0, 12:].view(torch.int32).tolist() == [1, 2, 4]
    assert enc[0, :12].view(torch.float32).tolist() == [-2.0, 2.0, 2.0]
    enc = hybrid.sr_encode(w, None, 2).cpu()
    assert enc[0, 8:].view(torch.int32).tolist() == [1, 2]


def test_decode_of_a_gathered_slice(device):
    """Decoding reads values and indices straight out of a column slice of the gathered
    blocks (a view, no copy): the offsets of SharedResidual.decode."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(4, 33, generator=gen).to(device)
    a, b = hybrid.sr_encode(w, None, 5), hybrid.sr_encode(w * 2, None, 3)
    blocks = torch.cat([a, b], 1)
    assert_bits_equal(hybrid.sr_decode(blocks[:, 40:], None, 33), cpp_decode(b.cpu(), None, 33),
                      "b")


SHAPES = [(6, 5), (6,), (5, 6), (5,), (1,)]  # w1, b1, w2, b2 and a one-value tensor
DOMAIN, LOCAL, EXPERTS = 3, 2, 12


def experts(gen: torch.Generator, step: int, kind: str):
    """The domain's experts at a step: stacked per tensor, DOMAIN x LOCAL experts; they move
    a little each step (as training moves them), or are degenerate."""
    out = []
    for i, s in enumerate(SHAPES):
        base = torch.randn(DOMAIN * LOCAL, *s, generator=gen)
        if kind == "zero":  # +0.0 and -0.0
            base = torch.where(torch.rand(base.shape, generator=gen) < 0.5, 0.0, -0.0)
        elif kind == "ties":
            base = torch.randint(-1, 2, base.shape, generator=gen).float()
        out.append(base)
    return out


@pytest.mark.parametrize("compression", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("shared,feedback", [(True, False), (True, True), (False, False),
                                             (False, True)])
def test_shared_residual_equals_host_round_trip(device, compression, shared, feedback):
    """Six steps of a domain of 3 members: every member's AllGather block, every member's
    copies and the state they keep equal the C++ round trip's, bit for bit (the experts on
    the device: the round trip copies them to the host and back, as it did there)."""
    gen = torch.Generator().manual_seed(int(compression * 100) + 2 * shared + feedback)
    args = (compression, shared, feedback, EXPERTS, SHAPES, DOMAIN * LOCAL)
    ours = [hybrid.SharedResidual(*args) for _ in range(DOMAIN)]
    host = [HostSharedResidual(*args) for _ in range(DOMAIN)]
    w = [x.to(device) for x in experts(gen, 0, "random")]
    for step, kind in enumerate(["random", "random", "zero", "zero", "ties", "random"]):
        if step:
            w = [x + 0.1 * torch.randn(x.shape, generator=gen).to(device) for x in w]
            if kind != "random":
                w = [x.to(device) for x in experts(gen, step, kind)]
        own = [[x[m * LOCAL:(m + 1) * LOCAL] for x in w] for m in range(DOMAIN)]
        blocks = {}
        for name, codecs in (("ours", ours), ("host", host)):
            blocks[name] = torch.stack([codecs[m].encode(own[m], m * LOCAL)
                                        for m in range(DOMAIN)])
        assert torch.equal(blocks["ours"], blocks["host"]), f"step {step}: blocks differ"
        for m in range(DOMAIN):
            got = ours[m].decode(blocks["ours"], own[m], m)
            want = host[m].decode(blocks["host"], own[m], m)
            for t in range(len(SHAPES)):
                assert got[t].device == want[t].device and not got[t].requires_grad
                assert_bits_equal(got[t], want[t].cpu(), f"step {step} member {m} tensor {t}")
                mine = slice(m * LOCAL, (m + 1) * LOCAL)
                assert torch.equal(got[t][mine], own[m][t])  # the owner's exact weights
            if feedback:
                for slot in range(DOMAIN * LOCAL):
                    for t in range(len(SHAPES)):
                        assert_bits_equal(ours[m].received[t][slot],
                                          torch.from_numpy(host[m].received[slot][t]),
                                          f"step {step} member {m} R of slot {slot}")
        summed = sum(ours[m].own_sum(own[m]) for m in range(DOMAIN))  # the AllReduce
        for a, b in zip(ours, host):
            a.set_shared_sum(summed)
            b.set_shared_sum(summed)
        if shared:
            for t in range(len(SHAPES)):
                assert_bits_equal(ours[0].shared[t], torch.from_numpy(host[0].shared[t]),
                                  f"step {step} shared {t}")
