"""The maze grids the E163 experiments sweep, written ``W,K,L;W,K,L`` on the command line (``--set configs=...``)."""

from __future__ import annotations

from agentmill.envs.pathstar import PathStarMultigraph


def parse_configs(text: str) -> list[tuple[int, int, int]]:
    """``"4,5,2;4,6,2"`` -> [(4, 5, 2), (4, 6, 2)] (W, K, L triples), validated."""
    out = []
    for part in (p for p in text.split(";") if p.strip()):
        vals = part.split(",")
        if len(vals) != 3:
            raise ValueError(f"configs must be 'W,K,L;W,K,L;...', got {part!r}")
        W, K, L = (int(v) for v in vals)
        PathStarMultigraph(W, K, L)
        out.append((W, K, L))
    if not out:
        raise ValueError("configs must name at least one W,K,L triple")
    return out
