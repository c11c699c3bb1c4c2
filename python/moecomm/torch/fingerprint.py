"""Every rank's settings compared before a layer or GradSync issues its first collective: ranks
built with different sizes, strategies or layouts would otherwise wait on collectives their
peers never issue, fail inside the backend, or train on silently wrong tensors. The check and
its message mirror moecomm's runtime (rt/config_fingerprint.h): ``ranks disagree on
strategy: a2a: rank 0 has 2dh, ranks 1-3 have flat``."""
from __future__ import annotations

import datetime
from typing import Any, List, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import Error, _moecomm

Setting = Tuple[str, str]  # (name, value as text)


def fnv1a(text: str) -> int:
    """64-bit FNV-1a of the UTF-8 bytes, as the runtime's fnv1a."""
    h = 14695981039346656037
    for c in text.encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _int64(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def text(v: Any) -> str:
    """A setting's value as text (bools lower case, as the runtime writes them)."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # the shortest text that reads back as v
    if isinstance(v, datetime.timedelta):
        return f"{v.total_seconds()!r} s"
    return str(v)


def strategy_settings(strategy: str) -> List[Setting]:
    """Each knob of the strategy as built (sched::to_string's text), so that a knob added
    there is compared too. The name only labels the run."""
    out = []
    for item in strategy.split(","):
        key, eq, value = item.partition("=")
        if eq and key != "name":
            out.append((f"strategy: {key}", value))
    return out


def schedule_settings(schedule: Any) -> List[Setting]:
    """What a built schedule fixes: the layout, the cluster as resolved (by a digest: the
    message stays one line), every strategy knob (HybridEP's among them)."""
    # The sizes given before dp, which follows from them and the world.
    parallel = schedule.parallel
    out = [(k, text(parallel[k])) for k in ("tp", "ep", "esp", "pp", "cp", "dp")]
    name, cluster = schedule.cluster
    out.append(("cluster", f"{name or 'unnamed'}, hash {fnv1a(cluster):016x}"))
    return out + strategy_settings(schedule.strategy)


def _device() -> torch.device:
    # The default group's backend decides where its tensors live (NCCL: the current GPU).
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _gather(values: Sequence[int], device: torch.device) -> List[List[int]]:
    mine = torch.tensor(list(values), dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [t.tolist() for t in everyone]


def _gather_text(value: str, device: torch.device) -> List[str]:
    """Every rank's ``value``: the lengths, then the bytes padded to the longest."""
    data = value.encode()
    lengths = [n for [n] in _gather([len(data)], device)]
    longest = max(lengths)
    padded = torch.zeros(max(longest, 1), dtype=torch.uint8)
    padded[:len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    padded = padded.to(device)
    everyone = [torch.empty_like(padded) for _ in lengths]
    dist.all_gather(everyone, padded)
    return [bytes(t[:n].tolist()).decode(errors="replace") for t, n in zip(everyone, lengths)]


def _shown(value: str) -> str:
    longest, start = 48, 32
    if not value:
        return "''"
    if len(value) <= longest:
        return value
    return f"{value[:start]}... (hash {fnv1a(value) >> 32:08x})"


def disagreement(name: str, values: Sequence[str]) -> str:
    """``ranks disagree on NAME: rank 0 has A, ranks 1-3 have B``: each distinct value in
    the order of the first rank holding it (rt::disagreement)."""
    holders: dict = {}
    for r, v in enumerate(values):
        holders.setdefault(v, []).append(r)
    parts = []
    for v, ranks in holders.items():
        one = len(ranks) == 1
        parts.append(f"{'rank' if one else 'ranks'} {_moecomm.format_rank_ranges(ranks)} "
                     f"{'has' if one else 'have'} {_shown(v)}")
    return f"ranks disagree on {name}: " + ", ".join(parts)


def check_agreement(owner: str, settings: Sequence[Setting]) -> None:
    """Raises moecomm.Error on every rank, naming the first setting that differs and which
    ranks hold which value, when the ranks' ``settings`` differ. Collective over the default
    group: every rank calls it at the same point, before any other collective or new_group.
    One AllGather of two numbers when the ranks agree; when they do not, the per-setting
    hashes, then the first differing setting's values (so the world stays usable)."""
    device = _device()
    hashes = [_int64(fnv1a(f"{n}\0{v}")) for n, v in settings]
    overall = _int64(fnv1a("\0".join(f"{n}\0{v}" for n, v in settings)))
    summary = _gather([len(settings), overall], device)
    if all(s == summary[0] for s in summary):
        return
    # A rank that lists fewer settings pads with 0: a setting it lacks differs.
    width = max(n for n, _ in summary)
    every = _gather(hashes + [0] * (width - len(hashes)), device)
    differ = [i for i in range(width) if any(h[i] != every[0][i] for h in every)]

    def name(i: int) -> str:
        return settings[i][0] if i < len(settings) else f"setting {i}"

    first = differ[0]
    values = _gather_text(settings[first][1] if first < len(settings) else "", device)
    message = f"{owner}: {disagreement(name(first), values)}"
    # Further settings that differ, by name (those past the end of a rank's list follow from
    # the first: that rank's schedule failed to build).
    named, shortest = 4, min(n for n, _ in summary)
    further = [i for i in differ[1:] if i < shortest]
    others = [name(i) for i in further[:named]]
    if others:
        more = len(further) - named
        message += " (and on " + ", ".join(others) + (f" and {more} more" if more > 0 else "") \
            + ")"
    raise Error(message)


def check_built(owner: str, settings: Sequence[Setting], build) -> Any:
    """``build()``'s schedule, once every rank's ``settings`` and schedule agree
    (check_agreement). A rank whose build fails takes part in the check with its error in
    place of the schedule's settings, so its peers fail naming it instead of waiting for it
    in their first collective; it raises its own error."""
    try:
        schedule, built, error = build(), [("schedule build", "succeeded")], None
        built += schedule_settings(schedule)
    except Error as e:
        schedule, built, error = None, [("schedule build", "failed")], e
    try:
        check_agreement(owner, list(settings) + built)
    except Error:
        if error is None:
            raise
    if error is not None:
        raise error
    return schedule


def layer_settings(layer: Any, extra: dict) -> List[Setting]:
    """A layer's sizes and routing, then ``extra`` (the constructor's other arguments that
    change what it computes or which groups it makes), as text."""
    out = [(k, text(getattr(layer, k))) for k in
           ("hidden", "ffn_hidden", "experts", "top_k", "ffn_type", "gate", "temperature")]
    return out + [(k, text(v)) for k, v in extra.items()]
