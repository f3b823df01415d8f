"""The fork client's window for late answers, widened where a test needs a slow fork
server kept rather than taken for stuck.

A fork server's answers must all arrive :data:`~agentpool.supervisor.forkclient.LATE_ANSWER_S`
(1 s) after its batch's deadline, or the client kills it. In the tests that make a
server slow on purpose (stopped, or stopped after each fork), the answers past the
deadline come after a SIGCONT sent by a thread of the test. On two cores shared with
other work that signal, the server's turn and the client's can each wait for a CPU
long enough to use up that second, and a server that is slow but answering gets killed
by a correct client: the test then fails for a reason it does not test. The tests
that this window itself is about (a stuck server is killed and replaced) keep the
product's value.
"""

from __future__ import annotations

import pytest

from agentpool.supervisor import forkclient

LATE_ANSWER_S = 4.0
"""The late answers' window in those tests: four times the product's."""


def widen_late_answers(monkeypatch: pytest.MonkeyPatch) -> float:
    """Give the fork client :data:`LATE_ANSWER_S` for late answers (for the test, undone
    after it); returns the longest a batch then takes (``SPAWN_BOUND_S`` with it)."""
    monkeypatch.setattr(forkclient, "LATE_ANSWER_S", LATE_ANSWER_S)
    return (forkclient.SPAWN_TIMEOUT_S + LATE_ANSWER_S + forkclient.DISCARD_WAIT_S
            + forkclient.KILL_WAIT_S)
