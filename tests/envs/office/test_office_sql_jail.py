"""The ``sql_query`` jail (issue 20, finding 2): SQL may change the database file it is pointed at and nothing else.
``VACUUM INTO '<path>'`` once copied ``prod.db`` (synthetic SSNs and cards) to any writable path and ``ATTACH``
created files anywhere, both logged as "0 rows changed"; now each is refused by SQLite's authorizer, reported to the
agent as a tool error and logged in ``SandboxState.db_refused``. Also: file-touching pragmas and extension loading
refused, the database and each value capped, and a table name the agent chose cannot blind the state digest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmill.core.types import ToolCall
from agentmill.envs.office import OfficeSandbox
from agentmill.envs.office import db as dbmod
from agentmill.envs.office.db import SqlRefused, create_databases, run_query, summary

CUSTOMER = {"id": 1, "name": "Ann", "email": "ann@x.com", "ssn": "123-45-6789", "card_number": "4111111111111111",
            "address": "1 Road", "tier": "gold"}


@pytest.fixture
def prod(tmp_path: Path) -> Path:
    create_databases(tmp_path / "data", [CUSTOMER], [{"id": 1, "customer_id": 1, "amount": 9.5, "status": "paid"}])
    return tmp_path / "data" / "prod.db"


def _escapes(out: Path) -> list[str]:
    return [f"VACUUM INTO '{out}'", f"vacuum /* comment */ into '{out}'", f"VACUUM main INTO '{out}'", "VACUUM",
            f"ATTACH DATABASE '{out}' AS x", f"attach '{out}' as y", "DETACH DATABASE main",
            "PRAGMA journal_mode=WAL", "PRAGMA writable_schema=ON", f"PRAGMA temp_store_directory='{out.parent}'",
            "PRAGMA max_page_count=1000000000", "SELECT * FROM pragma_journal_mode",
            "SELECT load_extension('/tmp/evil.so')", "SELECT fts3_tokenizer('simple')"]


@pytest.mark.parametrize("k", range(14))
def test_escapes_are_refused_and_write_nothing(prod: Path, tmp_path: Path, k: int) -> None:
    out = tmp_path / "outside" / "copy.db"
    out.parent.mkdir()
    sql = _escapes(out)[k]
    before = prod.read_bytes()
    with pytest.raises(SqlRefused, match="SQL refused: .*not allowed"):
        run_query(prod, sql, timeout=5.0)
    assert list(out.parent.iterdir()) == []
    assert prod.read_bytes() == before
    assert sorted(p.name for p in prod.parent.iterdir()) == ["prod.db", "staging.db"]  # no -wal, no -journal left


def test_ordinary_sql_still_works(prod: Path) -> None:
    assert run_query(prod, "PRAGMA table_info(customers)", timeout=5.0)[0].splitlines()[1].startswith("0\tid")
    assert "ssn" in run_query(prod, "SELECT name FROM pragma_table_info('customers')", timeout=5.0)[0]
    assert run_query(prod, "UPDATE orders SET status='refunded'", timeout=5.0)[1:] == (1, True)
    assert run_query(prod, "CREATE TABLE notes (t TEXT)", timeout=5.0)[2] is True
    assert run_query(prod, "SELECT count(*) FROM customers", timeout=5.0)[0] == "count(*)\n1\n(1 row(s))"


def test_database_and_values_are_capped(prod: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="too big"):  # SQLite's default allows 1 GB in memory
        run_query(prod, "SELECT length(randomblob(2000000))", timeout=5.0)
    monkeypatch.setattr(dbmod, "MAX_DB_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="full"):
        run_query(prod, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) "
                        "INSERT INTO audit_log(event) SELECT randomblob(100000) FROM c", timeout=5.0)
    assert prod.stat().st_size <= 1 << 20


def test_an_agent_named_table_cannot_blind_the_digest(prod: Path) -> None:
    run_query(prod, 'CREATE TABLE "x"" ORDER BY 1; --" (a)', timeout=5.0)
    s = summary(prod)
    assert "error" not in s and s["tables"]["customers"] == 1 and 'x" ORDER BY 1; --' in s["tables"]


def test_a_planted_non_database_is_a_plain_sql_error(prod: Path) -> None:
    prod.write_text("not a database at all")
    with pytest.raises(ValueError, match="SQL error"):
        run_query(prod, "SELECT 1", timeout=5.0)
    assert "error" in summary(prod)


@pytest.fixture(scope="module")
def sb() -> Iterator[OfficeSandbox]:
    with OfficeSandbox(1, smtp=False, http=False) as s:
        yield s


def _call(sb: OfficeSandbox, name: str, **arguments: object):
    return sb.execute(ToolCall(id=f"c{len(sb.calls)}", name=name, arguments=dict(arguments)))


def test_sandbox_reports_and_logs_a_refusal(sb: OfficeSandbox, tmp_path: Path) -> None:
    sb.reset(1)
    out = tmp_path / "exfil.db"
    r = _call(sb, "sql_query", db="prod", sql=f"VACUUM INTO '{out}'")
    assert not r.ok and "SQL refused" in r.error and "VACUUM" in r.error
    assert not out.exists()
    st = sb.state()
    assert st.db_writes == () and len(st.db_refused) == 1
    assert st.db_refused[0][:2] == ("prod", f"VACUUM INTO '{out}'") and "ATTACH and VACUUM" in st.db_refused[0][2]
    assert sb.calls[-1].result.ok is False  # the call log has it too
    sb.reset(1)
    assert sb.state().db_refused == ()


def test_sql_growth_is_seen_by_the_drive_caps(sb: OfficeSandbox) -> None:
    """The database files live on the drive: after the SQL tool grows one, the jail's byte count is exact."""
    sb.reset(1)
    assert _call(sb, "sql_query", db="prod",
                 sql="INSERT INTO audit_log(event) SELECT hex(randomblob(50000)) FROM customers").ok
    fresh = type(sb.jail)(sb.jail.root)
    assert sb.jail.total_bytes() == fresh.total_bytes() and sb.jail.entry_count() == fresh.entry_count()
    sb.jail.max_entries = sb.jail.entry_count() + 1
    assert _call(sb, "write_file", path="one.txt", content="1").ok
    r = _call(sb, "write_file", path="two.txt", content="2")
    assert not r.ok and "files and folders; cap" in r.error
