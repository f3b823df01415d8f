"""Kubernetes label selectors: the string grammar and matching (POOL_NODE_SELECTOR)."""

from __future__ import annotations

import pytest

from agentpool.labelselectors import Op, Requirement, SelectorError, parse_selector
from tests.support.selector_cases import (
    INVALID,
    LABEL_SETS,
    MATCHES,
    SERVER_ONLY_INVALID,
    SERVER_ONLY_MATCHES,
)

MANAGED = {
    "joulie.io/managed": "true",
    "tier": "gold",
    "kubernetes.io/hostname": "w1",
    "cores": "32",
}


def test_parse_every_operator() -> None:
    sel = parse_selector("a, !b, c=1, d==2, e!=3, f in (x, y), g notin (z)")
    assert sel.requirements == (
        Requirement("a", Op.EXISTS),
        Requirement("b", Op.NOT_EXISTS),
        Requirement("c", Op.EQUALS, frozenset({"1"})),
        Requirement("d", Op.EQUALS, frozenset({"2"})),
        Requirement("e", Op.NOT_EQUALS, frozenset({"3"})),
        Requirement("f", Op.IN, frozenset({"x", "y"})),
        Requirement("g", Op.NOT_IN, frozenset({"z"})),
    )


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("joulie.io/managed=true", True),
        ("joulie.io/managed==true", True),
        ("joulie.io/managed=false", False),
        ("joulie.io/managed!=true", False),
        ("joulie.io/managed", True),
        ("!joulie.io/managed", False),
        ("missing", False),
        ("!missing", True),
        # != and notin also match nodes without the key, as in Kubernetes.
        ("missing!=x", True),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier in (gold,silver)", True),
        ("tier in (silver)", False),
        ("tier notin (gold)", False),
        ("joulie.io/managed=true,tier=gold", True),
        ("joulie.io/managed=true,tier=silver", False),
        ("tier=", False),
        ("", True),
        ("   ", True),
        # Integer comparisons, which the API server accepts too.
        ("cores>8", True),
        ("cores>64", False),
        ("cores<64", True),
        ("tier>1", False),  # not an integer: no match, as in Kubernetes
        ("missing>1", False),
    ],
)
def test_matches(selector: str, matches: bool) -> None:
    assert parse_selector(selector).matches(MANAGED) is matches


def test_empty_value_matches_an_empty_label_and_none_labels_are_empty() -> None:
    assert parse_selector("tier=").matches({"tier": ""})
    assert parse_selector("!a").matches(None)
    assert not parse_selector("a").matches(None)
    assert parse_selector("").empty
    assert not parse_selector("a").empty


@pytest.mark.parametrize(
    "selector",
    [
        "a in (b",
        "a in b)",
        "=x",
        "a,,b",
        "a,",
        "a in (b c)",
        "a in (-b)",
        "a=b c",
        "a = (b)",
        "-a=b",
        "a b",
        "a in ()",
        "a>b",
    ],
)
def test_parse_errors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)


@pytest.mark.parametrize(("selector", "expected"), MATCHES)
def test_shared_cases(selector: str, expected: frozenset[str]) -> None:
    sel = parse_selector(selector)
    assert {name for name, labels in LABEL_SETS.items() if sel.matches(labels)} == expected


@pytest.mark.parametrize("selector", INVALID)
def test_shared_invalid_selectors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)


def test_where_the_agent_parts_ways_with_the_api_server() -> None:
    # Documented divergences (tests/support/selector_cases.py): fixing one moves its case into
    # the shared table.
    for selector, _ in SERVER_ONLY_MATCHES:
        with pytest.raises(SelectorError):
            parse_selector(selector)
    for selector in SERVER_ONLY_INVALID:
        parse_selector(selector)
