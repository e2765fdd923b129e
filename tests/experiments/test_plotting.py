"""experiments.plotting: a headless pyplot, and a save that writes the file and frees the figure."""

from __future__ import annotations

from agentmill.experiments.plotting import pyplot, save


def test_save_writes_a_png_and_closes_the_figure(tmp_path) -> None:
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    before = len(plt.get_fignums())
    path = save(fig, tmp_path / "line.png", dpi=50)
    assert path == tmp_path / "line.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(plt.get_fignums()) == before - 1
