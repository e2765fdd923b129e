"""``agentmill constraint-rot``: the ConstraintRot benchmark (E164; spec constraint-rot.md §6.5).

    agentmill constraint-rot catalogue validate [--path DIR]     every family's self-checks; version + sha256
    agentmill constraint-rot catalogue list [--path DIR] [--kind soft|hard] [--split SPLIT]
    agentmill constraint-rot catalogue split [--path DIR]        families per split and kind
    agentmill constraint-rot pin-hook --registry rules.yaml      Claude Code SessionStart hook JSON with the cards

A thin face over ``agentmill.methods.constraint_rot``. Bad input (a malformed catalogue or registry) exits 2 with
one line naming the file and field.

The registry file of ``pin-hook`` is YAML: ``version`` (optional) and ``rules``, a list of ``{rule_id, text,
issuer, kind: soft|hard, scope_tools: [...]}``. Cards are rendered from it (never from a transcript).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

SPLITS = ("train", "dev", "test_iid", "test_ood_family")


def _catalogue(path: str | None) -> Any:
    from agentmill.methods.constraint_rot import load_catalogue

    return load_catalogue(Path(path) if path else None)


def cmd_catalogue(args: argparse.Namespace) -> int:
    cat = _catalogue(args.path)
    if args.catalogue_cmd == "validate":
        fams = cat.families()
        kinds = {k: sum(f.kind == k for f in fams) for k in ("soft", "hard")}
        print(json.dumps({"ok": True, "version": cat.version, "sha256": cat.sha256, "families": len(fams),
                          **kinds}, indent=2))
        return 0
    if args.catalogue_cmd == "split":
        table = {s: {k: sorted(f.id for f in cat.families(kind=k, split=s)) for k in ("soft", "hard")}
                 for s in SPLITS}
        print(json.dumps(table, indent=2))
        return 0
    for f in cat.families(kind=args.kind, split=args.split):
        print(f"{f.id:32s} {f.kind:5s} {','.join(f.tools)}")
    return 0


def load_registry(path: Path) -> Any:
    """A frozen :class:`PolicyRegistry` from a registry YAML file (module docstring)."""
    import yaml

    from agentmill.methods.constraint_rot.pinning import PolicyRegistry

    if not path.is_file():
        raise ValueError(f"{path}: registry file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: malformed YAML: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list) or not data["rules"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'rules' list")
    reg = PolicyRegistry(version=str(data.get("version", "1")))
    for i, r in enumerate(data["rules"]):
        where = f"{path}: rules[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected a mapping")
        missing = [k for k in ("rule_id", "text", "issuer", "kind") if k not in r]
        unknown = sorted(set(r) - {"rule_id", "text", "issuer", "kind", "scope_tools"})
        if missing or unknown:
            raise ValueError(f"{where}: missing {missing} / unknown {unknown} fields")
        try:
            reg.register(str(r["rule_id"]), str(r["text"]), issuer=str(r["issuer"]), kind=r["kind"],
                         scope_tools=list(r.get("scope_tools") or ()))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    reg.freeze()
    return reg


def cmd_pin_hook(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.pinning.integrations.claude_code import session_start_hook_output

    print(session_start_hook_output(load_registry(Path(args.registry))))
    return 0


def register(sub) -> None:
    sp = sub.add_parser("constraint-rot", help="ConstraintRot (E164): rule catalogue, Constraint Pinning hooks")
    cs = sp.add_subparsers(dest="cr_cmd", required=True)
    c = cs.add_parser("catalogue", help="validate, list or split the rule catalogue")
    c.add_argument("catalogue_cmd", choices=("validate", "list", "split"))
    c.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    c.add_argument("--kind", choices=("soft", "hard"), default=None, help="list: only this kind")
    c.add_argument("--split", choices=SPLITS, default=None, help="list: only this split")
    c.set_defaults(fn=cmd_catalogue)
    h = cs.add_parser("pin-hook", help="print Claude Code SessionStart hook JSON carrying the rule cards")
    h.add_argument("--registry", required=True, help="registry YAML (rules: [{rule_id, text, issuer, kind, "
                                                       "scope_tools}])")
    h.set_defaults(fn=cmd_pin_hook)
