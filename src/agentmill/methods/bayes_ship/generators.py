"""An LM patch generator: asks a model for the full corrected text of the buggy file(s) and returns them as a
candidate (``files``: path → text). Refinement feeds back the failing critic's note. The offline experiments use
the LM-free ``envs.pyrepo.PoolGenerator`` (known kernel); this one needs a capable model (an ``openai:`` endpoint or a
``replay:`` recording): SmolLM2-135M does not write patches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentmill.lm.base import GenerateConfig

PROMPT = ("Fix the bug described in the issue. Reply with the complete corrected file in one ```python block and "
          "nothing else.\nIssue:\n{issue}\n\nFile {path}:\n```python\n{text}\n```\n{feedback}")
FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)


@dataclass
class LMPatchGenerator:
    """``next(task, feedback="") -> {"files": {path: text}, "raw": reply, "ok": bool}``."""

    lm: Any
    max_new_tokens: int = 2048
    temperature: float = 0.8
    seed: int = 0
    calls: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)

    def next(self, task: Any, feedback: str = "") -> dict[str, Any]:
        files: dict[str, str] = {}
        raws = []
        ok = True
        for path, text in sorted(getattr(task, "bug_files", {}).items()):
            prompt = PROMPT.format(issue=getattr(task, "issue", ""), path=path, text=text,
                                   feedback=f"\nA previous attempt failed: {feedback}\n" if feedback else "")
            cfg = GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                 seed=self.seed + self.calls)
            reply = self.lm.generate([prompt], cfg)[0].text
            self.calls += 1
            raws.append(reply)
            m = FENCE.search(reply)
            if m is None:
                ok = False  # no code block: the candidate is the file unchanged (the oracle will say wrong)
                files[path] = text
            else:
                files[path] = m.group(1)
        out = {"files": files, "raw": raws, "ok": ok}
        self.log.append({"task": getattr(task, "instance_id", ""), "ok": ok})
        return out
