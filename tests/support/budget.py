"""How many examples each property runs: a fixed, stated budget per Hypothesis profile.

``AGENTPOOL_HYPOTHESIS_PROFILE`` chooses the profile (read once, at import):

- ``ci`` (the default, what ``bash scripts/check`` and CI run): each property
  runs exactly the examples its :func:`examples` call states, derandomized (the
  same examples on every run, so CI cannot turn red by chance) and without an
  example database. All properties together take well under two minutes on
  two busy cores.
- ``campaign`` (``scripts/fuzz``): random, with the example database under
  ``.hypothesis/``, and :data:`CAMPAIGN_FACTOR` times the CI budget per
  round; the script runs round after round with fresh seeds until its time
  is up.
- ``dev``: random, with the database, the CI budget: a quick local search
  that remembers what failed.

No deadline in any profile: a slow example on a loaded machine is not a bug
(the HTTP properties bound their own time explicitly).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILE_ENV = "AGENTPOOL_HYPOTHESIS_PROFILE"
PROFILES = ("ci", "campaign", "dev")
CAMPAIGN_FACTOR = 25
"""A campaign round runs this many times each property's CI budget."""

_COMMON = {
    "deadline": None,
    "print_blob": True,
    # Examples that build sysfs trees or start servers are slow by nature.
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)  # type: ignore[arg-type]
settings.register_profile(
    "campaign",
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    **_COMMON,  # type: ignore[arg-type]
)
settings.register_profile(
    "dev", database=DirectoryBasedExampleDatabase(".hypothesis/examples"), **_COMMON  # type: ignore[arg-type]
)

PROFILE = os.environ.get(PROFILE_ENV, "").strip() or "ci"
if PROFILE not in PROFILES:
    raise RuntimeError(f"{PROFILE_ENV}={PROFILE!r}: expected one of {', '.join(PROFILES)}")
settings.load_profile(PROFILE)


def examples(ci: int) -> int:
    """The ``max_examples`` of a property whose CI budget is ``ci``."""
    return ci * CAMPAIGN_FACTOR if PROFILE == "campaign" else ci
