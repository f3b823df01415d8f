"""Label-selector cases that the agent's parser and the API emulator must both get right.

The expectations are written out by hand, from the Kubernetes selector
semantics, so neither implementation is the oracle of the other:
``tests/test_labelselectors.py`` runs them against :mod:`agentpool.labelselectors`, and
``tests/sim/test_selectors.py`` against the emulator through the real
kubernetes client (``list_node(label_selector=...)``).
"""

from __future__ import annotations

LABEL_SETS: dict[str, dict[str, str]] = {
    "managed-gold": {"joulie.io/managed": "true", "tier": "gold", "cores": "32"},
    "managed-silver": {"joulie.io/managed": "true", "tier": "silver", "cores": "8"},
    "unmanaged": {"joulie.io/managed": "false", "tier": "gold", "cores": "many"},
    "empty-tier": {"tier": ""},
    "bare": {},
}
"""Node name -> labels; every case is evaluated against all of them."""

ALL = frozenset(LABEL_SETS)

MATCHES: list[tuple[str, frozenset[str]]] = [
    ("", ALL),
    ("   ", ALL),
    ("joulie.io/managed=true", frozenset({"managed-gold", "managed-silver"})),
    ("joulie.io/managed==true", frozenset({"managed-gold", "managed-silver"})),
    ("joulie.io/managed = true", frozenset({"managed-gold", "managed-silver"})),
    ("joulie.io/managed!=true", frozenset({"unmanaged", "empty-tier", "bare"})),
    ("joulie.io/managed", frozenset({"managed-gold", "managed-silver", "unmanaged"})),
    ("!joulie.io/managed", frozenset({"empty-tier", "bare"})),
    ("missing", frozenset()),
    ("!missing", ALL),
    # != and notin also match objects without the key.
    ("missing!=x", ALL),
    ("missing notin (x)", ALL),
    ("missing in (x)", frozenset()),
    ("tier in (gold,silver)", frozenset({"managed-gold", "managed-silver", "unmanaged"})),
    ("tier in ( gold , silver )", frozenset({"managed-gold", "managed-silver", "unmanaged"})),
    ("tier notin (gold)", frozenset({"managed-silver", "empty-tier", "bare"})),
    ("tier=", frozenset({"empty-tier"})),
    ("joulie.io/managed=true,tier=gold", frozenset({"managed-gold"})),
    ("joulie.io/managed=true, tier in (silver)", frozenset({"managed-silver"})),
    ("tier,!joulie.io/managed", frozenset({"empty-tier"})),
    # Integer comparisons: a value that is not an integer, or no value, never matches.
    ("cores>8", frozenset({"managed-gold"})),
    ("cores<9", frozenset({"managed-silver"})),
    ("cores>0", frozenset({"managed-gold", "managed-silver"})),
]

INVALID: list[str] = [
    "a in (b",
    "a in b)",
    "a in b",
    "=x",
    "a,,b",
    "a,",
    ",a",
    "a in (b c)",
    "a in (-b)",
    "a=b c",
    "a = (b)",
    "-a=b",
    "a b",
    "a>b",
    "a>",
    "a=b=c",
    "!a=b",
    "cores>-1",  # the bound of > and < must be a label value too: no sign
]

# Where the agent's parser and kube-apiserver part ways (found by running this table on
# both). The API servers are held to the server's answer, the agent to its own, so a
# change on either side shows up here.
SERVER_ONLY_MATCHES: list[tuple[str, frozenset[str]]] = [
    # The server reads "in ()" as the set holding the empty value; the agent refuses
    # it (a configuration error at start: stricter, harmless).
    ("tier in ()", frozenset({"empty-tier"})),
]
SERVER_ONLY_INVALID: list[str] = []
