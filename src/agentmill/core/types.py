"""Plain data types for conversations and agent trajectories.

They are frozen dataclasses with ``to_dict``/``from_dict`` so that every layer (methods, servers, run records)
can pass them around and write them to JSON without knowing about each other.

``StepTable``/``LabelTable``/``AdvantageResult`` are the column-wise step tables of the credit-assignment methods
(docs/methods/g2po.md): one row per environment step, numpy columns, round-tripping through the rollout JSONL
schema ``agentmill.rollout/1``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

Role = Literal["system", "user", "assistant", "tool"]
_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by an assistant turn (OpenAI ``tool_calls`` shape)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}

    @classmethod
    def from_openai(cls, d: dict[str, Any]) -> ToolCall:
        fn = d["function"]
        args = fn.get("arguments") or "{}"
        return cls(id=d.get("id", ""), name=fn["name"], arguments=json.loads(args) if isinstance(args, str) else args)


@dataclass(frozen=True)
class Message:
    """One chat turn. ``tool_call_id`` links a ``tool`` message to the call it answers.

    ``meta`` is harness bookkeeping (e.g. ConstraintRot's ``origin``/``trusted``/``step`` labels): it is not part of
    the conversation, so :meth:`to_dict` (what a model or an API sees) leaves it out and equality ignores it.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ValueError(f"Message.role must be one of {_ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message.content must be str, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls(role=d["role"], content=d.get("content") or "",
                   tool_calls=tuple(ToolCall.from_openai(t) for t in d.get("tool_calls") or ()),
                   tool_call_id=d.get("tool_call_id"), name=d.get("name"))


@dataclass(frozen=True)
class Step:
    """One environment step of an agent: what it saw, what it did, what it got."""

    observation: str
    action: str
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    """A finished episode. ``reward`` is the outcome reward; ``None`` means unscorable (never a failure)."""

    steps: tuple[Step, ...]
    reward: float | None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(steps=tuple(Step(**s) for s in d["steps"]), reward=d["reward"], meta=dict(d.get("meta", {})))


@dataclass(frozen=True)
class Group:
    """Trajectories sampled for the same prompt/task: the unit of GRPO-style group statistics."""

    key: str
    trajectories: tuple[Trajectory, ...]

    @property
    def rewards(self) -> list[float | None]:
        return [t.reward for t in self.trajectories]


# ---------------------------------------------------------------------------------------------------------------
# Step-level tables for credit assignment (E165, E173).
#
# A trajectory group is stored column-wise: one row per environment step, S rows in all. Estimators (GRPO, GiGPO,
# G2PO, progress advantage) work on whole columns with numpy, so the table is columnar rather than a list of Steps.
# ---------------------------------------------------------------------------------------------------------------

ROLLOUT_SCHEMA = "agentmill.rollout/1"
"""Value of the ``schema`` field of every rollout JSONL line [R]."""

END_CONTINUES, END_TERMINATED, END_TRUNCATED = 0, 1, 2
"""Codes of ``StepTable.end``: the episode continues after the row, terminated after it, or was truncated after it."""
_END_NAMES = {END_TERMINATED: "terminated", END_TRUNCATED: "truncated"}
_END_CODES = {"terminated": END_TERMINATED, "truncated": END_TRUNCATED}

DEAD_END_DISTANCE = 1_000_000
"""Sentinel distance-to-goal of a state from which the goal is unreachable [R].
Unknown distances are -1."""

_STR_COLS = ("group_id", "traj_id")
_OBJ_COLS = ("obs", "next_obs", "info", "next_info", "action", "candidates")


def _obj_array(values: Iterable[Any], n: int | None = None) -> np.ndarray:
    vals = list(values)
    out = np.empty(len(vals), dtype=object)
    for i, v in enumerate(vals):  # element-wise: equal-length tuples must not become a 2-D array
        out[i] = v
    if n is not None and len(out) != n:
        raise ValueError(f"column has {len(out)} rows, expected {n}")
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"not JSON-serialisable in a rollout record: {type(x).__name__}")


@dataclass(frozen=True, eq=False)
class StepTable:
    """S environment steps of one or more trajectory groups, column-wise.

    Row order: the rows of one trajectory are contiguous with ``t = 0, 1, ..., T_i - 1``, and the trajectories of
    one group are contiguous. Groups and trajectories may come in any order (a collector writes them as they
    finish); nothing relies on lexicographic order of the ids. Every column has shape (S,):

    - ``group_id``, ``traj_id``: str (numpy unicode). The group id is GRPO's "uid"; the pair (group, traj) names a
      trajectory.
    - ``t``: int32 step index.  ``obs``, ``next_obs``: object[str], o_t and o_{t+1}.
    - ``info``, ``next_info``: object[dict], env info with the oracle namespace removed (an ``"oracle"`` key is
      refused, so privileged state can never reach a state key).
    - ``action``: object[str].  ``candidates``: object[tuple[str, ...] | None], the admissible set when the policy
      chose among candidates.
    - ``reward``: float64 r_t, finite.  ``end``: int8, 0 = continues, 1 = terminated after this row, 2 = truncated
      after this row; nonzero exactly on the last row of each trajectory.
    - ``success``: bool, the trajectory's success repeated on each of its rows.

    The constructor accepts plain sequences and converts them; it validates everything and raises ``ValueError``
    naming the group, trajectory and row of the first problem. Build hand-made tables with ``from_episodes``.
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    t: np.ndarray
    obs: np.ndarray
    next_obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    end: np.ndarray
    success: np.ndarray
    info: np.ndarray | None = None
    next_info: np.ndarray | None = None
    candidates: np.ndarray | None = None

    def __post_init__(self) -> None:
        lengths = {name: len(getattr(self, name)) for name in
                   ("group_id", "traj_id", "t", "obs", "next_obs", "action", "reward", "end", "success")}
        for name in ("info", "next_info", "candidates"):
            if getattr(self, name) is not None:
                lengths[name] = len(getattr(self, name))
        if len(set(lengths.values())) != 1:
            raise ValueError(f"StepTable: mismatched column lengths {lengths}")
        n = lengths["t"]
        if n == 0:
            raise ValueError("StepTable: empty table (no rows)")
        set_ = object.__setattr__
        for name in _STR_COLS:
            col = getattr(self, name)
            set_(self, name, np.asarray([str(x) for x in col]) if not (isinstance(col, np.ndarray)
                                                                      and col.dtype.kind == "U") else col)
        set_(self, "t", np.asarray(self.t, dtype=np.int32))
        set_(self, "reward", np.asarray(self.reward, dtype=np.float64))
        set_(self, "end", np.asarray(self.end, dtype=np.int8))
        set_(self, "success", np.asarray(self.success, dtype=bool))
        for name in ("obs", "next_obs", "action"):
            set_(self, name, _obj_array(getattr(self, name)))
        set_(self, "info", _obj_array(self.info) if self.info is not None else _obj_array({} for _ in range(n)))
        set_(self, "next_info",
             _obj_array(self.next_info) if self.next_info is not None else _obj_array({} for _ in range(n)))
        set_(self, "candidates", _obj_array(None if c is None else tuple(c) for c in self.candidates)
             if self.candidates is not None else _obj_array(None for _ in range(n)))
        for name in ("t", "reward", "end", "success", "group_id", "traj_id"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"StepTable: column {name} must be 1-D of length {n}")
        self._validate()

    # -- validation --------------------------------------------------------------------------------------------
    def _where(self, row: int) -> str:
        g, tr = str(self.group_id[row]), str(self.traj_id[row])
        return f"group {g!r}, trajectory {tr!r}, row {row} (t={int(self.t[row])})"

    def _validate(self) -> None:
        bad = np.flatnonzero(~np.isfinite(self.reward))
        if bad.size:
            raise ValueError(f"StepTable: non-finite reward {self.reward[bad[0]]} at {self._where(int(bad[0]))}")
        bad = np.flatnonzero((self.end < 0) | (self.end > 2))
        if bad.size:
            raise ValueError(f"StepTable: end must be 0, 1 or 2, got {self.end[bad[0]]} at {self._where(int(bad[0]))}")
        starts = self.traj_starts
        lengths = np.diff(np.append(starts, len(self)))
        # (group, traj) blocks must be unique: a trajectory appearing twice is a duplicate or a split trajectory.
        seen: set[tuple[str, str]] = set()
        group_blocks: list[str] = []
        for s in starts:
            key = (str(self.group_id[s]), str(self.traj_id[s]))
            if key in seen:
                raise ValueError("StepTable: trajectory rows are not contiguous or duplicated at "
                                 f"{self._where(int(s))}")
            seen.add(key)
            if not group_blocks or group_blocks[-1] != key[0]:
                if key[0] in group_blocks:
                    raise ValueError("StepTable: the trajectories of a group must be contiguous; "
                                     f"{self._where(int(s))}")
                group_blocks.append(key[0])
        expected_t = np.arange(len(self)) - np.repeat(starts, lengths)
        bad = np.flatnonzero(self.t != expected_t)
        if bad.size:
            r = int(bad[0])
            raise ValueError(f"StepTable: non-contiguous t (expected {expected_t[r]}) or duplicate row at "
                             f"{self._where(r)}")
        last = np.zeros(len(self), dtype=bool)
        last[starts + lengths - 1] = True
        bad = np.flatnonzero((self.end != 0) & ~last)
        if bad.size:
            raise ValueError(f"StepTable: end flag {self.end[bad[0]]} before the last row at "
                             f"{self._where(int(bad[0]))}")
        bad = np.flatnonzero((self.end == 0) & last)
        if bad.size:
            raise ValueError("StepTable: the last row of a trajectory must be terminated (1) or truncated (2), "
                             f"got 0 at {self._where(int(bad[0]))}")
        traj_success = np.repeat(self.success[starts], lengths)
        bad = np.flatnonzero(traj_success != self.success)
        if bad.size:
            raise ValueError(f"StepTable: success differs between rows of one trajectory at {self._where(int(bad[0]))}")
        for name in ("obs", "next_obs", "action"):
            col = getattr(self, name)
            for i, x in enumerate(col):
                if not isinstance(x, str):
                    raise TypeError(f"StepTable: {name} must be str, got {type(x).__name__} at {self._where(i)}")
        for name in ("info", "next_info"):
            for i, d in enumerate(getattr(self, name)):
                if not isinstance(d, Mapping):
                    raise TypeError(f"StepTable: {name} must be a dict, got {type(d).__name__} at {self._where(i)}")
                if "oracle" in d:
                    raise ValueError(f"StepTable: {name} contains the 'oracle' namespace at {self._where(i)}; "
                                     "move it into a LabelTable (estimators must never see privileged state)")

    # -- structure ---------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def traj_starts(self) -> np.ndarray:
        """Row index of each trajectory's first row, in table order, shape (n_traj,)."""
        return np.flatnonzero(self._traj_change())

    def _traj_change(self) -> np.ndarray:
        return np.r_[True, (self.group_id[1:] != self.group_id[:-1]) | (self.traj_id[1:] != self.traj_id[:-1])]

    @property
    def traj_index(self) -> np.ndarray:
        """Trajectory number of each row (0.. in table order), int64 shape (S,). Deterministic: no hashing."""
        return np.cumsum(self._traj_change()) - 1

    @property
    def group_index(self) -> np.ndarray:
        """Group number of each row (0.. in table order), int64 shape (S,)."""
        change = np.r_[True, self.group_id[1:] != self.group_id[:-1]]
        return np.cumsum(change) - 1

    @property
    def is_last(self) -> np.ndarray:
        """True on each trajectory's last row, shape (S,)."""
        return self.end != END_CONTINUES

    @property
    def n_groups(self) -> int:
        return int(self.group_index[-1]) + 1

    @property
    def n_trajectories(self) -> int:
        return int(self.traj_index[-1]) + 1

    def take(self, rows: Sequence[int] | np.ndarray) -> StepTable:
        """A new table of the given rows (in that order); the result is validated like any table."""
        idx = np.asarray(rows, dtype=np.int64)
        return StepTable(**{name: getattr(self, name)[idx] for name in _ALL_COLS})

    def take_trajectories(self, order: Sequence[int] | np.ndarray) -> StepTable:
        """Reorder or subset whole trajectories by their ``traj_index`` numbers (e.g. to permute within a group)."""
        starts = self.traj_starts
        ends = np.append(starts[1:], len(self))
        return self.take(np.concatenate([np.arange(starts[k], ends[k]) for k in order]))

    @staticmethod
    def concat(tables: Sequence[StepTable]) -> StepTable:
        if not tables:
            raise ValueError("StepTable.concat: no tables")
        return StepTable(**{name: np.concatenate([getattr(tb, name) for tb in tables]) for name in _ALL_COLS})

    def equals(self, other: StepTable) -> bool:
        """Exact equality of every column (dataclass ``==`` is disabled: numpy arrays have no truth value)."""
        return isinstance(other, StepTable) and len(self) == len(other) and all(
            np.array_equal(getattr(self, n), getattr(other, n)) if n not in _OBJ_COLS
            else list(getattr(self, n)) == list(getattr(other, n)) for n in _ALL_COLS)

    # -- builders ----------------------------------------------------------------------------------------------
    @classmethod
    def from_episodes(cls, episodes: Iterable[Mapping[str, Any]]) -> StepTable:
        """Build a table from hand-written episodes, e.g. ``{"group_id": "g", "traj_id": "t1", "obs": ["S", "A",
        "W"], "actions": ["a", "b"], "rewards": [0, 1], "end": "terminated", "success": True}``.

        ``obs`` has T+1 entries (o_0..o_T); ``actions`` and ``rewards`` have T. Optional: ``infos`` (T+1 dicts),
        ``candidates`` (T entries), ``end`` ("terminated" default, or "truncated"), ``success`` (default: terminated
        with a positive return, the usual "won" reading; pass it explicitly when that is not the meaning).
        """
        cols: dict[str, list[Any]] = {name: [] for name in _ALL_COLS}
        for k, ep in enumerate(episodes):
            obs, actions = list(ep["obs"]), list(ep["actions"])
            rewards = [float(r) for r in ep.get("rewards", [0.0] * len(actions))]
            T = len(actions)
            if T == 0:
                raise ValueError(f"from_episodes: episode {k} has no actions")
            if len(obs) != T + 1 or len(rewards) != T:
                raise ValueError(f"from_episodes: episode {k} needs len(obs) == len(actions) + 1 == len(rewards) + 1,"
                                 f" got {len(obs)}, {T}, {len(rewards)}")
            end = ep.get("end", "terminated")
            end_code = _END_CODES[end] if isinstance(end, str) else int(end)
            success = ep.get("success")
            if success is None:
                success = end_code == END_TERMINATED and sum(rewards) > 0
            infos = list(ep.get("infos") or [{} for _ in range(T + 1)])
            cands = list(ep.get("candidates") or [None] * T)
            gid, tid = str(ep.get("group_id", "g0")), str(ep.get("traj_id", f"traj{k}"))
            for t in range(T):
                cols["group_id"].append(gid)
                cols["traj_id"].append(tid)
                cols["t"].append(t)
                cols["obs"].append(obs[t])
                cols["next_obs"].append(obs[t + 1])
                cols["info"].append(dict(infos[t]))
                cols["next_info"].append(dict(infos[t + 1]))
                cols["action"].append(actions[t])
                cols["candidates"].append(cands[t])
                cols["reward"].append(rewards[t])
                cols["end"].append(end_code if t == T - 1 else END_CONTINUES)
                cols["success"].append(bool(success))
        return cls(**cols)

    # -- JSONL (one line per trajectory) ------------------------------------------------------------------------
    def to_records(self, labels: LabelTable | None = None,
                   traj_fields: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
        """One ``agentmill.rollout/1`` record per trajectory.

        ``traj_fields[(group_id, traj_id)]`` supplies the trajectory-level fields the table does not hold
        (``task_id``, ``env``, ``seed``, ``meta``, ...). Two fields extend the planned schema (g2po README deviation 6)
        so that the table round-trips exactly: ``final_obs``/``final_info`` (o_T, which no step row holds), and a
        per-step ``next_obs``/``next_info`` written only where it differs from the following step's ``obs``/``info``.
        """
        if labels is not None and len(labels) != len(self):
            raise ValueError(f"to_records: LabelTable has {len(labels)} rows, StepTable {len(self)}")
        starts = self.traj_starts
        ends = np.append(starts[1:], len(self))
        for s, e in zip(starts.tolist(), ends.tolist()):
            gid, tid = str(self.group_id[s]), str(self.traj_id[s])
            steps = []
            for r in range(s, e):
                step: dict[str, Any] = {"t": int(self.t[r]), "obs": self.obs[r], "info": dict(self.info[r]),
                                        "action": self.action[r], "reward": float(self.reward[r])}
                if self.candidates[r] is not None:
                    step["candidates"] = list(self.candidates[r])
                if r + 1 < e:
                    if self.next_obs[r] != self.obs[r + 1]:
                        step["next_obs"] = self.next_obs[r]
                    if self.next_info[r] != self.info[r + 1]:
                        step["next_info"] = dict(self.next_info[r])
                if labels is not None:
                    step["label"] = labels.row(r)
                steps.append(step)
            rec: dict[str, Any] = {"schema": ROLLOUT_SCHEMA, "group_id": gid, "traj_id": tid, "task_id": gid}
            rec.update(dict((traj_fields or {}).get((gid, tid), {})))
            rec.update({"success": bool(self.success[s]), "return": float(self.reward[s:e].sum()),
                        "end": _END_NAMES[int(self.end[e - 1])], "steps": steps,
                        "final_obs": self.next_obs[e - 1], "final_info": dict(self.next_info[e - 1])})
            yield rec

    def to_jsonl(self, dest: str | Any, labels: LabelTable | None = None,
                 traj_fields: Mapping[tuple[str, str], Mapping[str, Any]] | None = None, *,
                 append: bool = False) -> None:
        """Write one JSON line per trajectory to a path or an open text file (flushed; fsynced when a path)."""
        lines = [json.dumps(rec, default=_json_default, ensure_ascii=False) + "\n"
                 for rec in self.to_records(labels, traj_fields)]
        if hasattr(dest, "write"):
            dest.writelines(lines)
            dest.flush()
            return
        with open(dest, "a" if append else "w", encoding="utf-8") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> tuple[StepTable, LabelTable | None]:
        """Inverse of ``to_records``: the table and, when every step carries a ``label``, the LabelTable."""
        cols: dict[str, list[Any]] = {name: [] for name in _ALL_COLS}
        labels: list[Mapping[str, Any] | None] = []
        for k, rec in enumerate(records):
            if rec.get("schema") != ROLLOUT_SCHEMA:
                raise ValueError(f"rollout record {k}: schema {rec.get('schema')!r}, expected {ROLLOUT_SCHEMA!r}")
            steps = rec["steps"]
            if not steps:
                raise ValueError(f"rollout record {k} (group {rec.get('group_id')!r}, trajectory "
                                 f"{rec.get('traj_id')!r}) has no steps")
            end_code = _END_CODES[rec["end"]]
            for j, st in enumerate(steps):
                last = j == len(steps) - 1
                nxt = None if last else steps[j + 1]
                cols["group_id"].append(str(rec["group_id"]))
                cols["traj_id"].append(str(rec["traj_id"]))
                cols["t"].append(int(st["t"]))
                cols["obs"].append(st["obs"])
                cols["info"].append(dict(st.get("info") or {}))
                cols["action"].append(st["action"])
                cols["reward"].append(float(st["reward"]))
                c = st.get("candidates")
                cols["candidates"].append(None if c is None else tuple(c))
                cols["next_obs"].append(st["next_obs"] if "next_obs" in st else
                                        (rec["final_obs"] if last else nxt["obs"]))
                cols["next_info"].append(dict(st["next_info"]) if "next_info" in st else
                                         dict((rec.get("final_info") or {}) if last else (nxt.get("info") or {})))
                cols["end"].append(end_code if last else END_CONTINUES)
                cols["success"].append(bool(rec["success"]))
                labels.append(st.get("label"))
        table = cls(**cols)
        if labels and all(lab is not None for lab in labels):
            return table, LabelTable.from_rows(labels)  # type: ignore[arg-type]
        return table, None

    @classmethod
    def from_jsonl(cls, src: str | Any) -> tuple[StepTable, LabelTable | None]:
        """Read a rollout JSONL file (path or open text file). Returns (StepTable, LabelTable or None)."""
        def parse(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
            for i, line in enumerate(lines):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"rollout JSONL line {i + 1}: {exc}") from exc
        if hasattr(src, "read"):
            return cls.from_records(parse(src))
        with open(src, encoding="utf-8") as fh:
            return cls.from_records(parse(fh))


_ALL_COLS = ("group_id", "traj_id", "t", "obs", "next_obs", "action", "reward", "end", "success", "info",
             "next_info", "candidates")


@dataclass(frozen=True, eq=False)
class LabelTable:
    """Oracle labels, one row per StepTable row in the same order. Estimators never receive it.

    - ``dist_before``, ``dist_after``: int64 distance-to-goal before/after the step; -1 unknown;
      ``DEAD_END_DISTANCE`` when the goal is unreachable.
    - ``progress``: int8, 1 = the step made progress, 0 = it did not, -1 = unknown.
    - ``dead_end``: bool, the step entered a dead end.
    """

    dist_before: np.ndarray
    dist_after: np.ndarray
    progress: np.ndarray
    dead_end: np.ndarray

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "dist_before", np.asarray(self.dist_before, dtype=np.int64))
        set_(self, "dist_after", np.asarray(self.dist_after, dtype=np.int64))
        set_(self, "progress", np.asarray(self.progress, dtype=np.int8))
        set_(self, "dead_end", np.asarray(self.dead_end, dtype=bool))
        lengths = {n: getattr(self, n).shape for n in ("dist_before", "dist_after", "progress", "dead_end")}
        if len(set(lengths.values())) != 1 or len(lengths["progress"]) != 1:
            raise ValueError(f"LabelTable: columns must be 1-D of equal length, got {lengths}")
        bad = np.flatnonzero((self.progress < -1) | (self.progress > 1))
        if bad.size:
            raise ValueError(f"LabelTable: progress must be 1, 0 or -1, got {self.progress[bad[0]]} at row {bad[0]}")

    def __len__(self) -> int:
        return int(self.progress.shape[0])

    @classmethod
    def unknown(cls, n: int) -> LabelTable:
        """n rows with every label unknown."""
        return cls(np.full(n, -1), np.full(n, -1), np.full(n, -1), np.zeros(n, dtype=bool))

    @classmethod
    def from_distances(cls, dist_before: Sequence[int], dist_after: Sequence[int]) -> LabelTable:
        """Labels from distances alone: progress = 1 when the distance fell, 0 when it did not, -1 when either is
        unknown; dead_end when the step entered the sentinel distance."""
        b, a = np.asarray(dist_before, dtype=np.int64), np.asarray(dist_after, dtype=np.int64)
        known = (b >= 0) & (a >= 0)
        progress = np.where(known, (a < b).astype(np.int8), np.int8(-1))
        return cls(b, a, progress, a >= DEAD_END_DISTANCE)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> LabelTable:
        return cls([int(r.get("dist_before", -1)) for r in rows], [int(r.get("dist_after", -1)) for r in rows],
                   [int(r.get("progress", -1)) for r in rows], [bool(r.get("dead_end", False)) for r in rows])

    def row(self, i: int) -> dict[str, Any]:
        return {"dist_before": int(self.dist_before[i]), "dist_after": int(self.dist_after[i]),
                "progress": int(self.progress[i]), "dead_end": bool(self.dead_end[i])}

    def take(self, rows: Sequence[int] | np.ndarray) -> LabelTable:
        idx = np.asarray(rows, dtype=np.int64)
        return LabelTable(self.dist_before[idx], self.dist_after[idx], self.progress[idx], self.dead_end[idx])

    @staticmethod
    def concat(tables: Sequence[LabelTable]) -> LabelTable:
        return LabelTable(*(np.concatenate([getattr(tb, n) for tb in tables])
                            for n in ("dist_before", "dist_after", "progress", "dead_end")))


class AdvantageResult(NamedTuple):
    """What every step-level estimator returns. Arrays are float64, shape (S,), in table row order.

    ``advantages`` is what the policy gradient uses; ``episode`` and ``step`` are its two terms (the episode-level
    GRPO term and the estimator's step/graph term, 0 where unused); ``returns`` is the discounted return-to-go
    G_{i,t}; ``diagnostics`` holds scalar facts about the computation (e.g. the graph's merge rate).
    """

    advantages: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    returns: np.ndarray
    diagnostics: dict[str, float]
