"""Distillers turn one run into text memory. ``RuleDistiller`` (LLM-free) [R]:

- a plan only from a successful run (failed runs update counters only);
- facts from API metadata, schemas and error messages — never from user-content fields (prompt injection);
  a fact with the same (subject, key) and a new value supersedes the old one;
- pitfalls from (error → remedy that worked) pairs.
"""

from __future__ import annotations

import dataclasses
import re

from agentmill.envs.appsim import ENDPOINTS, USER_CONTENT_FIELDS
from agentmill.methods.metis.memory import MemoryStore
from agentmill.methods.metis.policy import ActResult
from agentmill.methods.metis.records import Fact, InstanceRef, Pitfall, Plan  # noqa: F401

FIELD_SCHEMAS = {"payments.list": {"amount": (("amount", 1.0), ("amount_cents", 0.01))}}
"""Logical fields whose physical name is read off response item keys (metadata, never values)."""
REMEDY_TEXT = {"login": "call auth.login for the app before its other endpoints",
               "page_limit": "use the page_limit the error names and loop over next_page",
               "read_docs": "read docs.get for the endpoint: its item fields changed",
               "retry": "retry the call"}
REGEX = {"login": r"not logged in", "page_limit": r"page_limit must be <=", "read_docs": r"no field",
         "retry": r"."}
MAX_INSTANCES = 8


class RuleDistiller:
    name = "rule"
    calls = 0

    def distill(self, store: MemoryStore, *, key: str, res: ActResult, success: bool, instance: InstanceRef,
                t: int, write_plan: bool = True, signature=(), query: str = "") -> list[str]:
        """Write what ``res`` teaches into ``store``; return the kinds of events written."""
        written: list[str] = []
        # facts: metadata of responses, docs read, error messages
        for ep, meta in res.trace.metadata:
            if meta.get("paginated"):
                written += ["fact"] * store.put_fact(Fact(ep, "paginates", True, (instance.task_id,), 1.0, t), t)
            if meta.get("default_limit") and meta.get("page_limit"):
                written += ["fact"] * store.put_fact(Fact(ep, "page_limit_max", int(meta["page_limit"]),
                                                          (instance.task_id,), 0.8, t), t)
            for logical, options in FIELD_SCHEMAS.get(ep, {}).items():
                fields = [f for f in meta.get("item_fields", []) if f not in USER_CONTENT_FIELDS]
                for name, scale in options:
                    if name in fields:
                        written += ["fact"] * store.put_fact(Fact(ep, f"field:{logical}",
                                                                  {"name": name, "scale": scale},
                                                                  (instance.task_id,), 1.0, t), t)
        for doc in res.docs:
            ep = doc.get("endpoint", "")
            if ep not in ENDPOINTS:
                continue
            if "page_limit_max" in doc:
                written += ["fact"] * store.put_fact(Fact(ep, "page_limit_max", int(doc["page_limit_max"]),
                                                          (instance.task_id,), 1.0, t), t)
            if doc.get("paginates"):
                written += ["fact"] * store.put_fact(Fact(ep, "paginates", True, (instance.task_id,), 1.0, t), t)
            for logical, spec in (doc.get("fields") or {}).items():
                written += ["fact"] * store.put_fact(Fact(ep, f"field:{logical}", dict(spec), (instance.task_id,),
                                                          1.0, t), t)
        for err in res.trace.errors:
            m = re.search(r"page_limit must be <= (\d+)", err.message)
            if m and err.endpoint in ENDPOINTS:
                written += ["fact"] * store.put_fact(Fact(err.endpoint, "page_limit_max", int(m.group(1)),
                                                          (instance.task_id,), 1.0, t), t)
        # pitfalls: errors whose remedy worked
        for err, kind, worked in res.remedies:
            if worked and kind != "retry":
                store.put_pitfall(Pitfall(err.endpoint, err.code, REGEX[kind], REMEDY_TEXT[kind], kind), t)
                written.append("pitfall")
        # plan: written only from a successful run
        plan = store.plan(key)
        if not write_plan:
            return written
        if success:
            steps = plan.steps if (plan is not None and res.source == "tool") else res.steps or (
                plan.steps if plan else ())
            if not steps:
                return written
            inst = ((plan.instances if plan else ()) + (instance,))[-MAX_INSTANCES:]
            new = Plan(key, tuple(steps), (plan.seen if plan else 0) + 1, (plan.succeeded if plan else 0) + 1,
                       plan.failed if plan else 0, t, inst)
            store.put_plan(new, t)
            written.append("plan")
        elif plan is not None:
            store.put_plan(dataclasses.replace(plan, seen=plan.seen + 1, failed=plan.failed + 1, last_used=t), t)
            written.append("plan")
        return written


class LMDistiller:
    """The LM writes the plan (JSON list of steps with slot references) from a successful run; facts and pitfalls
    stay rule-based (API metadata and errors only). A plan that does not parse, uses an unknown endpoint or a slot
    the pattern lacks is re-asked up to 3 times, then the rule distiller's plan (the steps executed) is used."""

    name = "lm"

    def __init__(self, lm) -> None:
        from agentmill.lm.base import GenerateConfig

        self.lm, self.rule = lm, RuleDistiller()
        self.gen = GenerateConfig(max_new_tokens=600, temperature=0.0)
        self.calls = 0
        self.fallbacks = 0

    def distill(self, store: MemoryStore, *, key: str, res: ActResult, success: bool, instance: InstanceRef,
                t: int, write_plan: bool = True, signature=(), query: str = "") -> list[str]:
        import json as _json

        from agentmill.envs.appsim import Step

        if success and write_plan and res.source not in ("tool",) and not res.steps:
            calls = "\n".join(f"{ep} {_json.dumps(a, sort_keys=True)} ok={ok}" for ep, a, ok in res.trace.calls)
            error = ""
            for _ in range(4):
                prompt = (f"ROLE: distiller\nPATTERN: {key}\nSLOTS: {_json.dumps([n for n, _ in signature])}\n"
                          f"TASK: {query}\nCALLS:\n{calls}\n{error}\nWrite the plan as a JSON list of steps.")
                self.calls += 1
                out = self.lm.generate([prompt], self.gen)[0].text
                try:
                    steps = tuple(Step.from_dict(d) for d in _json.loads(out))
                    from agentmill.methods.metis.records import CodifyRequest

                    CodifyRequest(key, tuple(signature), steps)  # slot check
                    res.steps = steps
                    break
                except (ValueError, TypeError, KeyError) as e:
                    error = f"ERROR in your last plan: {str(e)[:200]}"
            else:
                self.fallbacks += 1
        return self.rule.distill(store, key=key, res=res, success=success, instance=instance, t=t,
                                 write_plan=write_plan)
