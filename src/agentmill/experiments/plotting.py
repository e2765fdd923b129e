"""The figure boilerplate every experiment's ``plots`` shares: a headless pyplot and a save that frees the figure.

Plots run on machines with no display and in worker processes, so the backend is Agg; matplotlib is imported only
when a plot is drawn, so listing or importing experiments never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path, *, dpi: int = 110, **savefig: Any) -> Path:
    """Write ``fig`` to ``path`` and close it (an open figure per plot would pile up over a suite run)."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi, **savefig)
    plt.close(fig)
    return Path(path)
