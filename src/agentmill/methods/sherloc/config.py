"""SHERLOC's settings: one frozen dataclass; the CLI's flags come from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The recipe's default excluded directory names, matched at any depth [C] (NeMo-Skills recipes/sherloc).
NEMO_EXCLUDE_DIRS: tuple[str, ...] = (
    "test", "tests", "testing", "test_", "_test", "__pycache__", ".git", ".github", "docs", "examples", "scripts",
    "tools", "venv", "env", "node_modules", "dist", "build", "target", "bin", "obj", "coverage", ".pytest_cache",
    ".tox", ".mypy_cache", "locale", "translations", "i18n", "l10n", "static", "assets", "media", "uploads", "logs",
    "tmp", "temp", "vendor", "libs", "dependencies", "settings", "local_settings", "fixtures", "data", "datasets",
    "notebooks", "jupyter", "ipynb_checkpoints", "deploy", "deployment", "docker", "kubernetes", "ci", "cd", "github",
    "gitlab", "bitbucket", "readme", "license", "changelog", "contributing")
TEST_DIRS = ("test", "tests", "testing", "test_", "_test")


@dataclass(frozen=True)
class SherlocConfig:
    total_steps: int = 20
    """Turns of the localization loop [C]."""
    max_view_lines: int = 1000
    """view_file shows at most this many lines from the start of the range [C]."""
    search_window: int = 10
    """codebase_search shows this many lines before and after each hit [C]."""
    search_max_hits: int = 50
    """Hits listed per search; the rest are counted ("N more") [R]."""
    loop_threshold: int = 3
    """Identical consecutive tool calls before a "you are repeating yourself" turn [C]."""
    context_safety_margin: float = 0.9
    """The prompt plus the reserved generation must fit in this share of the window, else the run exits [C]."""
    max_retries: int = 2
    """Retries, with a request for brevity, of a reply that hit the generation cap [C]."""
    file_extensions: tuple[str, ...] = ("py", "cfg")
    """Extensions in the filtered view [C]."""
    exclude_dirs: tuple[str, ...] = NEMO_EXCLUDE_DIRS
    """Directory names excluded at any depth [C]."""
    show_line_counts: bool = False
    """repo_tree shows per-file line counts [C]."""
    remove_thinking: bool = False
    """Strip <think>…</think> from the history [C]."""
    implicit_tool_detection: bool = True
    """Accept a bare JSON object (no tags) as a tool call [C]."""
    findings: bool = True
    """Ask for the five findings fields (False: the locations-only ablation prompt) [C]."""
    max_locations: int = 20
    """Locations kept in a case file (the prompt sets no limit; this caps the file) [R]."""
    max_tool_output_tokens: int | None = None
    """Cap on one tool output in tokens, with a truncation note (None: no cap, the paper's setting; 1,500 for
    SmolLM2's 8k context) [R]."""
    temperature: float = 0.99
    """Sampling temperature of the reported runs [C]."""
    top_p: float = 0.95
    """Nucleus mass of the reported runs [C]."""
    max_new_tokens: int = 81920
    """Generation cap per step [C]."""
    max_seq_length: int = 262144
    """Context window; capped at the model's own (8,192 for SmolLM2) [C]."""
    mode: Literal["paper", "product"] = "paper"
    """``product`` shows test directories in the view [R]."""
    seed: int = 0
    """Sampling seed [C]."""

    def __post_init__(self) -> None:
        for name in ("total_steps", "max_view_lines", "search_window", "search_max_hits", "loop_threshold",
                     "max_new_tokens", "max_seq_length", "max_locations"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"SherlocConfig.{name} must be an int >= 1, got {v!r}")
        if not 0 < self.context_safety_margin <= 1:
            raise ValueError(f"SherlocConfig.context_safety_margin must be in (0, 1], got {self.context_safety_margin}")
        if self.max_retries < 0:
            raise ValueError(f"SherlocConfig.max_retries must be >= 0, got {self.max_retries}")
        if self.mode not in ("paper", "product"):
            raise ValueError(f"SherlocConfig.mode must be 'paper' or 'product', got {self.mode!r}")
        if self.max_tool_output_tokens is not None and self.max_tool_output_tokens < 16:
            raise ValueError(f"SherlocConfig.max_tool_output_tokens must be >= 16 or None, got "
                             f"{self.max_tool_output_tokens}")

    @property
    def excluded(self) -> frozenset[str]:
        ex = set(self.exclude_dirs)
        if self.mode == "product":
            ex -= set(TEST_DIRS)
        return frozenset(ex)
