"""Environment and flags: any string for any option is refused naming that option (or the
one a joint rule names), or accepted; never another exception.

``load_settings`` is what the CLI runs for the environment and its flags
alike (flags are merged over the environment first), so the property runs
it on every option of the table with any text.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.config.options import OPTIONS
from agentpool.config.settings import Settings, load_settings
from agentpool.errors import ConfigError
from tests.properties.strategies import NUMBER_WORDS
from tests.support.budget import examples

JOINED = (
    {"DVFS_TARGET_PCT", "DVFS_HOLD_BAND_PCT"},
    {"POOL_LEASE_DURATION", "POOL_LEASE_RENEW"},
    {"POD_NAME", "POOL_SHARD_ID", "POOL_SHARDS", "POOL_MEMBERSHIP", "POD_NAMESPACE",
     "POOL_STATEFULSET"},
    {"HTTP_CLIENT_CERT", "HTTP_CLIENT_KEY"},
    {"TELEMETRY_CPU_SOURCE", "TELEMETRY_CPU_HTTP_ENDPOINT"},
    {"TELEMETRY_CPU_CONTROL", "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT"},
    {"TELEMETRY_GPU_CONTROL", "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT"},
    {"AGENT_MODE", "NODE_NAME"},
)  # fmt: skip
"""Options checked together: an error about one may name the other."""

values = st.one_of(
    st.text().filter(lambda t: "\x00" not in t),  # no environment variable holds a NUL
    st.sampled_from(NUMBER_WORDS),
    st.sampled_from([
        "1h", "-1s", "1e400s", "9" * 30 + "h", "1.5.5s", "0", "0s", "500ms", "1m30s", "nan",
        "inf", "1_0", "99999999999999999999", "-0", ":8080", "[::1]:0", ":99999", "host:",
        "a in (", "!x", "a=b,c!=d", "a in (x,y),!b", "(", "http://[", "http://sim:abc/",
        "http://sim/{node}", "true", "TRUE", " yes ", "pool", "daemonset", "lease",
    ]),
)  # fmt: skip


@settings(max_examples=examples(300))
@given(option=st.sampled_from(OPTIONS), raw=values, base=st.sampled_from(["pool", "daemonset"]))
def test_any_string_for_any_option_is_refused_naming_it_or_accepted(
    option: object, raw: str, base: str
) -> None:
    env = option.env  # type: ignore[attr-defined]
    given_values = {"AGENT_MODE": base, "NODE_NAME": "worker-0", env: raw}
    try:
        result = load_settings(given_values)
    except ConfigError as exc:
        named = {exc.variable}
        assert exc.variable == env or any(env in g and named <= g for g in JOINED), (
            env, raw, exc.variable
        )
        assert str(exc).startswith(f"{exc.variable}=")
        assert exc.accepted
        return
    assert isinstance(result, Settings)
