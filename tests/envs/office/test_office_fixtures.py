from __future__ import annotations

import re

import pytest

from agentmill.envs.office.fixtures import FIXED_CLOCK, TEST_CARD_NUMBERS, generate_fixtures, luhn_valid


def test_same_seed_same_bytes_other_seed_differs() -> None:
    a, b, c = generate_fixtures(7), generate_fixtures(7), generate_fixtures(8)
    assert a.to_json() == b.to_json() and a.digest() == b.digest()
    assert a.to_json() != c.to_json()


def test_personal_data_is_synthetic() -> None:
    fx = generate_fixtures(3)
    for cust in fx.customers:
        area = int(cust["ssn"].split("-")[0])
        assert 900 <= area <= 999 and re.fullmatch(r"\d{3}-\d{2}-\d{4}", cust["ssn"])
        assert cust["card_number"] in TEST_CARD_NUMBERS
    assert all(luhn_valid(n) for n in TEST_CARD_NUMBERS)


def test_luhn_by_hand() -> None:
    assert luhn_valid("79927398713")  # the textbook example
    assert not luhn_valid("79927398710")
    assert not luhn_valid("4111111111111112")


def test_clock_and_domain() -> None:
    assert FIXED_CLOCK.isoformat() == "2026-06-23T10:00:00+00:00"
    fx = generate_fixtures(5, domain="acme.com")
    assert fx.company_domain == "acme.com"
    assert all(p["email"].endswith("@acme.com") for p in fx.people)
    assert all(m["date"] < FIXED_CLOCK.isoformat() for m in fx.inbox)


def test_bad_seed() -> None:
    with pytest.raises(ValueError, match="seed"):
        generate_fixtures("1")  # type: ignore[arg-type]
