"""Probe rollouts as Inspect eval logs (the optional ``inspect`` extra): one sample per rollout, the judges' labels
as scores, so Inspect's log viewer and ``read_eval_log`` tooling can read a labelled rollout set.

Input: the rollouts JSONL that ``agentmill probe sample`` writes (one row per rollout: ``rollout_id``, ``text``,
``labels``, ``vote``, ``truth``, the ids and the prompt's facts), or :class:`~.sampling.Rollout` objects.
Each sample, built from Inspect's own types:

- messages: the user turn (the prompt's user message) and the assistant turn, split at the trace closer into
  reasoning content (the thinking trace) and text (the answer); ``trace + "\\n</think>\\n" + answer`` is the sampled
  text exactly. The rollouts file stores the prompt as token ids only, so its text comes from a ``decode`` function
  (the CLI decodes with the rollouts' own model); without one the user turn says so and the ids stay in metadata.
- scores: one per judge id (``rule:lexicon_a``, ...), ``vote`` (their majority) and ``truth`` (the organism's
  grammar outcome), each 1 = refuse, 0 = comply. A judge that abstains, an unfinished rollout or a tied vote is
  *unscored* (Inspect's NaN sentinel, reason ``abstain`` or ``unfinished``), never counted as either label, as
  :func:`~.sampling.refuse_rate` counts. Inspect's own ``mean`` (the refuse share) and ``stderr`` are computed over
  the scored samples (``recompute_metrics``).
- metadata: template id, category, refuse probability ``q``, split, model spec, finish reason, sentence roles, the
  prompt and sampled token ids.

docs/methods/first_token_probe.md, "Export to Inspect", shows the API and ``agentmill probe export``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentmill.core.inspect_log import FORMATS, inspect_api, packages
from agentmill.core.inspect_log import write_log as core_write_log
from agentmill.methods.first_token_probe.rollout_files import jsonl_lines
from agentmill.methods.first_token_probe.traces import CLOSE, OPEN

TASK = "agentmill/first_token_probe"
"""The Inspect task name of an exported log."""
REQUIRED = ("rollout_id", "text", "labels", "vote")
"""Keys every rollouts row must have."""
STOP = {"eos": "stop", "stop": "stop", "length": "max_tokens", "max_tokens": "max_tokens"}
"""Rollout finish reason -> Inspect stop reason (anything else: ``unknown``)."""
_PROMPT_RE = re.compile(r"^User: (.*)\nAssistant: " + re.escape(OPEN) + r"$", re.S)


class ExportInputError(ValueError):
    """An input that is not a probe rollouts file, or an output path Inspect cannot write."""


def load_rollouts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a rollouts JSONL file; raises :class:`ExportInputError` naming the file and line."""
    p = Path(path)
    hint = "export reads the rollouts JSONL that `agentmill probe sample --out` writes"
    rows = []
    for i, row in jsonl_lines(p, ExportInputError, missing="no such file or directory", not_file=f"not a file ({hint})",
                              hint=hint):
        missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
        if missing:
            raise ExportInputError(f"{p}: line {i} is not a probe rollout (missing {missing}); {hint}")
        if not isinstance(row["labels"], dict):
            raise ExportInputError(f"{p}: line {i}: 'labels' must map judge ids to 1, 0 or null")
        ids = row.get("prompt_ids", [])
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ExportInputError(f"{p}: line {i}: 'prompt_ids' must be a list of token ids")
        rows.append(row)
    if not rows:
        raise ExportInputError(f"{p}: no rollouts in this file")
    return rows


def row_of(rollout: Any, lm_spec: str = "") -> dict[str, Any]:
    """A :class:`~.sampling.Rollout` as a rollouts row (the ``probe sample`` keys) plus its exact ``user`` text."""
    return {"rollout_id": rollout.key, "template_id": rollout.item.template_id, "category": rollout.item.category,
            "q": rollout.item.q, "split": rollout.item.split, "lm_spec": lm_spec, "prompt_ids": rollout.prompt_ids,
            "sampled_ids": rollout.sampled_ids, "text": rollout.text, "finish": rollout.finish,
            "labels": dict(rollout.labels), "vote": rollout.outcome, "truth": rollout.truth,
            "sentence_roles": list(rollout.parsed.roles) if rollout.parsed is not None else [],
            "user": rollout.item.user, "defense": rollout.defense, "prefill": rollout.prefill}


def user_text(row: Mapping[str, Any], decode: Callable[[Sequence[int]], str] | None = None) -> tuple[str, str | None]:
    """``(user message, full prompt text or None)``: the row's own ``user`` text, else its prompt ids decoded by
    ``decode`` and cut back to the user message; else a note that the prompt was not stored."""
    if row.get("user"):
        return str(row["user"]), None
    ids = row.get("prompt_ids") or []
    if decode is not None and ids:
        prompt = decode(ids)
        m = _PROMPT_RE.match(prompt)
        return (m.group(1) if m else prompt), prompt
    return (f"[prompt text not stored in the rollouts file: {len(ids)} token ids in metadata prompt_ids; export "
            "with a decoder to show it]"), None


def _label_score(api: Any, value: Any, *, unfinished: bool, what: str) -> Any:
    if value is None:
        reason = "unfinished" if unfinished else "abstain"
        return api.scorer.Score.unscored(reason=reason, explanation=f"{what}: no label ({reason})")
    if value not in (0, 1):
        raise ExportInputError(f"{what}: label {value!r} is not 1 (refuse), 0 (comply) or null")
    return api.scorer.Score(value=int(value), explanation=f"{what}: {'refuse' if value else 'comply'} "
                                                          "(1 = refuse, 0 = comply)")


def _assistant(api: Any, text: str, model: str) -> Any:
    m = api.model
    if CLOSE in text:
        trace, answer = text.split(CLOSE, 1)
        content: Any = [m.ContentReasoning(reasoning=trace), m.ContentText(text=answer)]
    else:  # unfinished: the trace never closed
        content = [m.ContentReasoning(reasoning=text)] if text else ""
    return m.ChatMessageAssistant(content=content, model=model or None, source="generate")


def rollouts_to_eval_log(rollouts: Sequence[Mapping[str, Any] | Any], *,
                         decode: Callable[[Sequence[int]], str] | None = None, lm_spec: str = "",
                         location: str = "", created: str | None = None) -> Any:
    """An Inspect ``EvalLog`` with one sample per rollout (rows or :class:`~.sampling.Rollout` objects; ``lm_spec``
    names the model of Rollout objects) and Inspect's metrics over every judge, the vote and the truth."""
    api = inspect_api()
    rows = [dict(r) if isinstance(r, Mapping) else row_of(r, lm_spec) for r in rollouts]
    if not rows:
        raise ExportInputError("no rollouts to export")
    judges = list(dict.fromkeys(j for r in rows for j in r["labels"]))
    names = [*judges, "vote", "truth"]
    samples, seen = [], set()
    for r in rows:
        rid = str(r["rollout_id"])
        if rid in seen:
            raise ExportInputError(f"rollout id {rid!r} occurs twice")
        seen.add(rid)
        spec = str(r.get("lm_spec") or lm_spec)
        user, prompt = user_text(r, decode)
        truth = r.get("truth")
        unfinished = truth is None and r.get("finish") not in ("eos", "stop")
        scores = {j: _label_score(api, r["labels"].get(j), unfinished=unfinished, what=j) for j in judges}
        scores["vote"] = _label_score(api, r["vote"], unfinished=unfinished, what="vote (judge majority)")
        scores["truth"] = _label_score(api, truth, unfinished=truth is None, what="truth (organism grammar)")
        msgs = [api.model.ChatMessageUser(content=user, source="input"), _assistant(api, str(r["text"]), spec)]
        meta = {k: r[k] for k in ("template_id", "category", "q", "split", "finish", "sentence_roles", "defense",
                                  "prefill", "prompt_ids", "sampled_ids") if k in r}
        meta.update({"lm_spec": spec, "labels": r["labels"]})
        if prompt is not None:
            meta["prompt_text"] = prompt
        out = api.model.ModelOutput.from_message(msgs[-1], stop_reason=STOP.get(str(r.get("finish")), "unknown"))
        samples.append(api.log.EvalSample(id=rid, epoch=1, input=user, target="", messages=msgs, output=out,
                                          scores=scores, metadata=meta))
    specs = sorted({str(s.metadata["lm_spec"]) for s in samples})
    digest = hashlib.sha256(json.dumps([[s.id, s.metadata.get("sampled_ids"), str(s.output.completion)]
                                        for s in samples], default=str).encode()).hexdigest()
    spec = api.log.EvalSpec(
        created=created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        task=TASK, task_id=digest[:22], run_id=digest[22:44], eval_id=digest[44:64],
        dataset=api.log.EvalDataset(name="first_token_probe:rollouts", location=location or None,
                                    samples=len(samples), sample_ids=[str(s.id) for s in samples]),
        model=specs[0] if len(specs) == 1 else "mixed", config=api.log.EvalConfig(), packages=packages(),
        metadata={"exported_by": "agentmill.methods.first_token_probe.inspect_export", "judges": judges,
                  "labels": "1 = refuse, 0 = comply; unscored = abstain or unfinished", "models": specs},
        scorers=[{"name": n, "metrics": [{"name": "inspect_ai/mean"}, {"name": "inspect_ai/stderr"}]}
                 for n in names])
    log = api.log.EvalLog(status="success", eval=spec, samples=samples)
    api.log.recompute_metrics(log)
    return log


def write_log(log: Any, out: str | os.PathLike[str]) -> Path:
    """Write ``log`` as an Inspect ``.eval`` or ``.json`` log (:func:`agentmill.core.inspect_log.write_log`)."""
    return core_write_log(log, out, ExportInputError)


def export_inspect(src: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   decode: Callable[[Sequence[int]], str] | None = None) -> tuple[Path, Any]:
    """Read the rollouts JSONL at ``src`` and write it to ``out`` as an Inspect log; ``(path, log)``."""
    if Path(out).suffix not in FORMATS:  # refuse before reading anything
        raise ExportInputError(f"--out {out}: the file name must end in .eval (Inspect's zip log) or .json")
    rows = load_rollouts(src)
    log = rollouts_to_eval_log(rows, decode=decode, location=str(src))
    return write_log(log, out), log


__all__ = ["ExportInputError", "export_inspect", "inspect_api", "load_rollouts", "row_of", "rollouts_to_eval_log",
           "user_text", "write_log"]
