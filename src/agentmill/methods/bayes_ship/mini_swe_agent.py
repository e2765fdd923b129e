"""The verify-or-ship controller inside mini-swe-agent's loop (extra ``agents``: ``mini-swe-agent`` 2.4.x).

mini-swe-agent ends a run when a command's output starts with the line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``:
its environment (``LocalEnvironment.execute`` and every other environment's ``_check_finished``) raises
``minisweagent.exceptions.Submitted``, an ``InterruptAgentFlow`` carrying one message of role ``exit`` whose
``extra`` holds ``exit_status="Submitted"`` and the ``submission`` text; ``DefaultAgent.run`` appends that message
and stops. Nothing stands between the agent's wish to submit and the submission (read from the installed 2.4.6
source: ``agents/default.py``, ``environments/local.py``, ``exceptions.py``).

:class:`BayesShipAgent` (a subclass of ``DefaultAgent``, built on first use) overrides ``execute_actions``, the step
that runs the model's commands, and catches ``Submitted`` there. The submission becomes a candidate of one
:class:`~agentmill.methods.bayes_ship.core.Episode`, and the controller decides, as often as it likes:

- **critic**: run that critic's shell command (:class:`ShellCheck`, exit status 0 = pass) on a copy of the agent's
  working directory, confined by :mod:`agentmill.core.sandbox`, and update the belief;
- **verify**: run the verifier's command the same way; correct → the submission goes through (``Submitted`` is
  re-raised, with the episode attached); wrong → the run ends ``BayesShipVerifiedWrong`` with an empty submission
  (terminal verify, the paper's setting) or, with ``verify_terminal=False``, the loop may refine;
- **ship** (only with ``CostModel.wrong_ship_loss``): the submission goes through unverified;
- **generate**: the submission is held back and a *refine* message (the critics' outcomes and the failing output's
  tail) becomes the observation of the submitting command; the loop continues, and the agent's next submission is
  the next candidate (``Episode.new_candidate``, the kernel moves the belief);
- **give_up**: the run ends ``BayesShipGaveUp`` with an empty submission (nothing worth verifying).

Every exit message and every refine observation carries ``extra["bayes_ship"]``: the decisions with their Q values
and explanations, the critics' outcomes, the beliefs and the episode's utility, so they are saved in mini-swe-agent's
trajectory file. Only environments whose working directory is on this machine can be checked (``LocalEnvironment``
and any environment with ``config.cwd``; pass ``workdir=`` otherwise); Docker-style environments are not supported.

The names this module relies on are in :data:`HOOKED_NAMES`; :func:`check_contract` returns the missing ones and
building the agent class raises "mini-swe-agent internals changed: <name>" when one has gone. The extra pins the
tested 2.4 series.
"""

from __future__ import annotations

import inspect
import io
import os
import sys
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core import bubblewrap, sandbox
from agentmill.core.extras import MissingExtraError
from agentmill.methods.bayes_ship.config import BayesShipConfig, Calibration, CostModel
from agentmill.methods.bayes_ship.core import Episode, make_controller

TESTED_VERSIONS = "2.4"
"""The mini-swe-agent release series this adapter was written and tested against (2.4.6)."""

HOOKED_NAMES: tuple[str, ...] = (
    "minisweagent.agents.default.DefaultAgent",
    "minisweagent.agents.default.DefaultAgent.run",
    "minisweagent.agents.default.DefaultAgent.execute_actions",
    "minisweagent.agents.default.DefaultAgent.add_messages",
    "minisweagent.agents.default.DefaultAgent.get_template_vars",
    "minisweagent.exceptions.InterruptAgentFlow",
    "minisweagent.exceptions.Submitted",
    "minisweagent.environments.local.LocalEnvironmentConfig.cwd",
)
"""Every mini-swe-agent name the adapter uses. Besides these, the adapter relies on: ``execute_actions(self,
message)`` reading ``message["extra"]["actions"]``, ``self.env.execute(action)``, ``self.model
.format_observation_messages(message, outputs, template_vars)``, ``Submitted(...).messages[0]["extra"]
["submission"]`` and ``run`` stopping on a message of role ``exit``; ``check_contract`` checks the signatures and
``InterruptAgentFlow.messages``, and the end-to-end test drives the rest."""

EXIT_GAVE_UP = "BayesShipGaveUp"
EXIT_VERIFIED_WRONG = "BayesShipVerifiedWrong"
REFINE_HEADER = "The submission was held back for refinement by the verify-or-ship controller."


# -- the contract with mini-swe-agent --------------------------------------------------------------------------------
def _import_minisweagent() -> None:
    """Import the parts of mini-swe-agent the adapter uses (quietly: its start-up banner is switched off unless
    ``MSWEA_SILENT_STARTUP`` is already set)."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    try:
        import minisweagent.agents.default  # noqa: F401
        import minisweagent.environments.local  # noqa: F401
        import minisweagent.exceptions  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] == "minisweagent":
            raise MissingExtraError("agents", "the mini-swe-agent adapter") from None
        raise


def _resolve(dotted: str) -> tuple[bool, Any]:
    """(found, object) for ``package.module.Attr.attr``: the longest importable module prefix, then attributes
    (a pydantic model's field counts as an attribute)."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            fields = getattr(obj, "model_fields", None)
            if isinstance(fields, Mapping) and name in fields:
                obj = fields[name]
            elif hasattr(obj, name):
                obj = getattr(obj, name)
            else:
                return False, None
        return True, obj
    return False, None


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def check_contract() -> list[str]:
    """The hooked names (and call shapes) missing from the installed mini-swe-agent; empty when all are there."""
    _import_minisweagent()
    missing = []
    found: dict[str, Any] = {}
    for name in HOOKED_NAMES:
        ok, obj = _resolve(name)
        if ok:
            found[name] = obj
        else:
            missing.append(name)
    agent = "minisweagent.agents.default.DefaultAgent"
    shapes = {f"{agent}.execute_actions(self, message)": (f"{agent}.execute_actions", ["self", "message"]),
              f"{agent}.run(self, task, **kwargs)": (f"{agent}.run", ["self", "task", "kwargs"])}
    for label, (name, want) in shapes.items():
        if name in found and _params(found[name])[:len(want)] != want:
            missing.append(label)
    exc = found.get("minisweagent.exceptions.Submitted")
    base = found.get("minisweagent.exceptions.InterruptAgentFlow")
    if exc is not None and base is not None:
        if not issubclass(exc, base):
            missing.append("minisweagent.exceptions.Submitted(InterruptAgentFlow)")
        elif getattr(exc({"role": "exit"}), "messages", None) != ({"role": "exit"},):
            missing.append("minisweagent.exceptions.InterruptAgentFlow.messages")
    return missing


def require_contract() -> None:
    """Raise ``RuntimeError("mini-swe-agent internals changed: <name>")`` for the first missing hooked name."""
    missing = check_contract()
    if missing:
        import minisweagent

        raise RuntimeError(f"mini-swe-agent internals changed: {missing[0]} (installed mini-swe-agent "
                           f"{getattr(minisweagent, '__version__', '?')}; this adapter was tested on the "
                           f"{TESTED_VERSIONS} series; all missing: {', '.join(missing)})")


# -- critics that are shell commands, run in the sandbox --------------------------------------------------------------
@dataclass(frozen=True)
class ShellCheck:
    """A critic (or the verifier) as a shell command run in a sandboxed copy of the agent's working directory."""

    name: str
    """The critic's name, as in the ``Calibration``."""
    command: str
    """A ``sh`` command run in the copy's root; exit status 0 = pass (e.g. ``python -m pytest -q tests/test_a.py``)."""
    cost: float
    """What one run costs, in the ``CostModel``'s unit (charged unless ``charge_measured``)."""
    wall_s: float = 120.0
    """Wall-clock limit; the whole process group is killed after it and the check counts as failed."""

    def __post_init__(self) -> None:
        if not self.name or not self.command.strip():
            raise ValueError("ShellCheck needs a name and a command")
        if not (self.cost >= 0 and self.wall_s > 0):
            raise ValueError(f"ShellCheck {self.name!r}: cost must be >= 0 and wall_s > 0")


@dataclass(frozen=True)
class CheckOutcome:
    """One sandboxed run of a :class:`ShellCheck`."""

    name: str
    passed: bool
    returncode: int
    wall_s: float
    timed_out: bool
    output_tail: str
    isolation: str


COPY_IGNORE = (".git", "__pycache__", ".venv", ".pytest_cache", ".mypy_cache")
"""Directory or file names left out of the copy the checks see (version-control and cache directories)."""


def pack_workdir(root: str | os.PathLike[str], *, ignore: Sequence[str] = COPY_IGNORE,
                 max_bytes: int = 64 << 20) -> bytes:
    """A tar of ``root`` (symlinks stored as links, never followed; names in ``ignore`` skipped); raises
    ``ValueError`` when the files add up to more than ``max_bytes``."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"working directory {str(root)!r} does not exist")
    total = 0
    skip = set(ignore)

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal total
        if skip.intersection(Path(info.name).parts):
            return None
        total += info.size
        if total > max_bytes:
            raise ValueError(f"working directory {str(root)!r} holds more than {max_bytes} bytes")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(root), arcname=".", filter=keep)
    return buf.getvalue()


def check_limits(check: ShellCheck) -> sandbox.SandboxLimits:
    """The rlimits of one check: its wall clock, CPU seconds as long, 2 GiB of address space, files up to 64 MiB,
    256 open files, a 256 MiB private ``/tmp`` (the copy and whatever the command writes) [R]."""
    cpu = max(1, int(check.wall_s))
    return sandbox.SandboxLimits(wall_s=check.wall_s, cpu_s=cpu, cpu_hard_s=cpu + 2, memory_bytes=2 << 30,
                                 max_file_bytes=64 << 20, max_open_files=256, tmp_bytes=256 << 20)


def run_check(check: ShellCheck, workdir: str | os.PathLike[str], *, tail_chars: int = 2000) -> CheckOutcome:
    """Run ``check.command`` with ``sh`` in a fresh sandboxed copy of ``workdir`` (bubblewrap: no network, uid
    65534, private ``/tmp``; ``AGENTMILL_SANDBOX=python-only``: a host temp copy with rlimits and the watchdog only).
    The interpreter running agentmill is first on ``PATH`` as ``python``. A too large working directory counts as
    a failed check; a machine without a sandbox raises ``SandboxUnavailable``."""
    iso = sandbox.isolation()
    try:
        data = pack_workdir(workdir)
    except ValueError as e:
        return CheckOutcome(check.name, False, -1, 0.0, False, str(e), iso)
    home = bubblewrap.WORKDIR if iso == "bwrap" else "."
    env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "HOME": home,
           "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "LC_ALL": "C.UTF-8"}
    script = "tar -xf - || exit 97\n" + check.command
    res = sandbox.run_command(["/bin/sh", "-c", script], limits=check_limits(check), stdin=data, env=env,
                              isolate=(iso == "bwrap"), max_output=1 << 20, tmp_prefix="agentmill-msa-")
    out = (res.stdout + res.stderr).decode("utf-8", errors="replace")
    if res.timed_out:
        out += f"\n[killed after {check.wall_s:g} s]"
    return CheckOutcome(check.name, res.returncode == 0 and not res.timed_out, res.returncode, res.wall_s,
                        res.timed_out, out[-tail_chars:], str(res.layers.get("isolation", iso)))


# -- the control configuration ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShipControl:
    """What the agent's submission step runs: the critics, the verifier, the controller's model and costs.

    The critics' and the verifier's costs come from their :class:`ShellCheck` (they replace ``cost.critic_costs``
    and ``cost.c_ver``); ``cost`` gives R, c_gen, ``wrong_ship_loss`` and the unit."""

    critics: tuple[ShellCheck, ...]
    """The cheap checks; one per critic in ``calib.critics``, same names."""
    verifier: ShellCheck
    """The expensive check that decides correctness (the full test suite, a hidden test)."""
    calib: Calibration
    """Prior, critic likelihoods and kernel (``bayes-ship calibrate`` fits one from labelled records)."""
    cost: CostModel = field(default_factory=CostModel)
    """R, c_gen, wrong_ship_loss and unit; critic costs and c_ver are taken from the checks."""
    cfg: BayesShipConfig = field(default_factory=BayesShipConfig)
    """Greedy or DP, J (max candidates = submissions per run), terminal or non-terminal verify."""
    charge_measured: bool = False
    """Charge each check's measured wall seconds instead of its declared cost (needs ``cost.unit == "seconds"``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "critics", tuple(self.critics))
        names = [c.name for c in self.critics]
        if len(set(names)) != len(names):
            raise ValueError(f"critic names repeat: {names}")
        if set(names) != set(self.calib.critics):
            raise ValueError(f"critics {sorted(names)} differ from the calibration's {sorted(self.calib.critics)}")
        if self.charge_measured and self.cost.unit != "seconds":
            raise ValueError("charge_measured charges seconds: set CostModel(unit='seconds')")

    @property
    def cost_model(self) -> CostModel:
        """``cost`` with the checks' costs."""
        return self.cost.with_(critic_costs={c.name: float(c.cost) for c in self.critics},
                               c_ver=float(self.verifier.cost))


# -- the agent -------------------------------------------------------------------------------------------------------
class _Control:
    """One run's episode state, kept on the agent (mini-swe-agent's classes stay untouched)."""

    def __init__(self, control: ShipControl, workdir: str | None) -> None:
        self.control = control
        self.cost = control.cost_model
        self.controller = make_controller(control.calib, self.cost, control.cfg)
        self.workdir = workdir
        self.episode: Episode | None = None
        self.log: list[dict[str, Any]] = []
        self.checks = {c.name: c for c in control.critics}

    def summary(self) -> dict[str, Any]:
        ep = self.episode
        res = ep.result() if ep is not None else None
        return {"outcome": res.outcome if res else "no_submission", "utility": res.utility if res else None,
                "actions": list(res.actions) if res else [], "beliefs": list(res.beliefs) if res else [],
                "costs": dict(res.costs) if res else {}, "candidates": ep.candidates if ep else 0,
                "log": list(self.log)}


def _refine_text(ctl: _Control, decision: Any, outcomes: list[CheckOutcome]) -> str:
    lines = [REFINE_HEADER,
             f"Estimated probability that it is correct: {decision.belief:.3f} ({decision.explanation}).",
             "Checks run on it:"]
    lines += [f"- {o.name}: {'passed' if o.passed else f'FAILED (exit {o.returncode})'}" for o in outcomes]
    if not outcomes:
        lines.append("- none (the controller expects a better candidate from a new attempt)")
    failed = [o for o in outcomes if not o.passed]
    for o in failed[:2]:
        lines += [f"Output of {o.name} (last lines):", o.output_tail.strip()[-1200:]]
    lines.append("Fix the problem, then submit again the same way.")
    return "\n".join(lines)


def _handle_submission(agent: Any, ctl: _Control, submitted: BaseException) -> dict[str, Any] | None:
    """Run the episode on one submission. Returns the observation that replaces the submission's output (refine),
    or raises: the submission itself (ship) or an exit message (give up, verified wrong)."""
    from minisweagent.exceptions import InterruptAgentFlow

    exit_msg = submitted.messages[0]  # type: ignore[attr-defined]
    submission = str(exit_msg.get("extra", {}).get("submission", ""))
    workdir = ctl.workdir or getattr(getattr(agent.env, "config", None), "cwd", "") or os.getcwd()

    def event(kind: str, payload: dict[str, Any]) -> None:
        ctl.log.append({"event": kind, "candidate": ctl.episode.candidates if ctl.episode else 1, **payload})

    if ctl.episode is None:
        ctl.episode = Episode(ctl.controller, ctl.control.calib, ctl.cost, on_event=event)
    else:
        ctl.episode.new_candidate(refined_from_prior=True)
    ep = ctl.episode
    outcomes: list[CheckOutcome] = []

    def finish(status: str) -> InterruptAgentFlow:
        return InterruptAgentFlow({"role": "exit", "content": f"{status}: {ep.result().outcome}",
                                   "extra": {"exit_status": status, "submission": "", "held_submission": submission,
                                             "bayes_ship": ctl.summary()}})

    for _ in range(len(ctl.checks) + 2):  # each critic at most once per candidate, then one terminal action
        d = ep.next()
        ctl.log[-1]["q"] = {k: round(float(v), 6) for k, v in d.q.items()}
        if d.action == "critic":
            out = run_check(ctl.checks[d.critic], workdir)
            outcomes.append(out)
            ep.observe(d.critic, out.passed, out.wall_s if ctl.control.charge_measured else None)
            ctl.log[-1].update(returncode=out.returncode, wall_s=round(out.wall_s, 3), isolation=out.isolation)
        elif d.action == "verify":
            out = run_check(ctl.control.verifier, workdir)
            outcomes.append(out)
            ep.verified(out.passed, out.wall_s if ctl.control.charge_measured else None)
            ctl.log[-1].update(returncode=out.returncode, wall_s=round(out.wall_s, 3), isolation=out.isolation)
            if ep.outcome == "verified_correct":
                exit_msg.setdefault("extra", {})["bayes_ship"] = ctl.summary()
                raise submitted
            if ep.outcome == "verified_wrong":
                raise finish(EXIT_VERIFIED_WRONG)
            # non-terminal verify said wrong: the next decision is generate (refine) or give up
        elif d.action == "ship":
            ep.shipped()
            exit_msg.setdefault("extra", {})["bayes_ship"] = ctl.summary()
            raise submitted
        elif d.action == "generate":
            text = _refine_text(ctl, d, outcomes)
            return {"output": text, "returncode": 1, "exception_info": "",
                    "extra": {"bayes_ship": {"decision": "refine", "belief": d.belief,
                                             "candidate": ep.candidates}}}
        else:
            ep.gave_up()
            raise finish(EXIT_GAVE_UP)
    ep.gave_up()
    raise finish(EXIT_GAVE_UP)


_AGENT_CLASS: type | None = None


def agent_class() -> type:
    """``BayesShipAgent``: mini-swe-agent's ``DefaultAgent`` with the controller in its submission step (built on
    first use; raises ``MissingExtraError`` without the ``agents`` extra and ``RuntimeError("mini-swe-agent internals
    changed: <name>")`` when a hooked name has gone)."""
    global _AGENT_CLASS
    if _AGENT_CLASS is not None:
        return _AGENT_CLASS
    require_contract()
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.exceptions import Submitted

    class BayesShipAgent(DefaultAgent):
        """``DefaultAgent(model, env, **agent_config)`` whose submissions go through :class:`ShipControl`.

        ``workdir``: where the checks copy the candidate from (default: the environment's ``config.cwd``, else the
        current directory). After ``run``, ``bayes_ship`` holds the episode summary (also in the exit message's
        ``extra["bayes_ship"]``)."""

        def __init__(self, model: Any, env: Any, *, control: ShipControl, workdir: str | None = None,
                     **kwargs: Any) -> None:
            super().__init__(model, env, **kwargs)
            sandbox.isolation()  # fail now, not at the first submission, on a machine without a sandbox
            self.control = control
            self._workdir = workdir
            self._ctl = _Control(control, workdir)

        @property
        def bayes_ship(self) -> dict[str, Any]:
            return self._ctl.summary()

        def run(self, task: str = "", **kwargs: Any) -> dict:
            self._ctl = _Control(self.control, self._workdir)
            return super().run(task, **kwargs)

        def execute_actions(self, message: dict) -> list[dict]:
            """``DefaultAgent.execute_actions`` with the submission intercepted: the actions run in order; when one
            submits, the episode decides, and a refine replaces that action's output (later actions of the same
            message are not run, as in the original)."""
            outputs: list[dict] = []
            for action in message.get("extra", {}).get("actions", []):
                try:
                    outputs.append(self.env.execute(action))
                except Submitted as e:
                    refine = _handle_submission(self, self._ctl, e)
                    outputs.append(refine)  # type: ignore[arg-type]
                    break
            return self.add_messages(*self.model.format_observation_messages(message, outputs,
                                                                             self.get_template_vars()))

    _AGENT_CLASS = BayesShipAgent
    return BayesShipAgent


def __getattr__(name: str) -> Any:  # ``from ...mini_swe_agent import BayesShipAgent`` builds the class lazily
    if name == "BayesShipAgent":
        return agent_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def decision_sequence(summary: Mapping[str, Any]) -> list[str]:
    """The controller's decisions of a run, in order, as ``"<candidate>:<action>[:<critic>]"`` strings (a compact
    view of ``summary["log"]`` for logs and tests)."""
    out = []
    for e in summary.get("log", []):
        if e.get("event") == "decision":
            out.append(f"{e['candidate']}:{e['action']}" + (f":{e['critic']}" if e.get("critic") else ""))
    return out


__all__ = ["COPY_IGNORE", "CheckOutcome", "EXIT_GAVE_UP", "EXIT_VERIFIED_WRONG", "HOOKED_NAMES", "REFINE_HEADER",
           "ShellCheck", "ShipControl", "TESTED_VERSIONS", "agent_class", "check_contract", "check_limits",
           "decision_sequence", "pack_workdir", "require_contract", "run_check"]
