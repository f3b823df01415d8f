"""The property suites' Hypothesis profile is loaded before any of them is collected."""

from tests.properties import budget  # noqa: F401 - registers and loads the profile
