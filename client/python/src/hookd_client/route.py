"""Which replica of a shared hookd tier holds a destination.

Every replica keeps its own store, so all of a destination's events must reach the same
replica. `pick` is rendezvous (highest random weight) hashing, the same rule as the Rust
client's `hookd_client::route` and the Node package's `pick`: each replica scores
``fmix64(FNV-1a 64(replica name, a zero byte, destination))`` and the highest score wins;
ties go to the name first in sort order. `docs/deploy.md` has the rule and its check values.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["pick", "score"]

_MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x00000100000001B3


def score(replica: str, destination: str) -> int:
    """The score (an unsigned 64-bit integer) of `replica` for `destination`."""
    h = _FNV_OFFSET
    for b in replica.encode() + b"\0" + destination.encode():
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    # murmur3's 64-bit finaliser: FNV alone barely separates hookd-0 from hookd-1.
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK
    return h ^ (h >> 33)


def pick(destination: str, replicas: Iterable[str]) -> str | None:
    """The replica that holds `destination` (``endpoint:orders``, ``queue:jobs``) among
    `replicas` (``hookd-0.hookd.default.svc:7700``, ...); None when there is none."""
    best: tuple[int, str] | None = None
    for r in replicas:
        s = score(r, destination)
        # Highest score; on a tie the smaller name, whatever the list's order.
        if best is None or s > best[0] or (s == best[0] and r < best[1]):
            best = (s, r)
    return None if best is None else best[1]
