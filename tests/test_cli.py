"""The command line: the acceptance commands through a real ``python -m agentpool`` process,
and every configuration error through click's in-process runner (same code, faster)."""

from __future__ import annotations

import configparser
import hashlib
import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentpool.cli import cli, settings_from
from agentpool.config.options import OPTIONS
from tests.support.config_errors import ERRORS


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any agent variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in {o.env for o in OPTIONS}}
    env.update(extra)
    return env


def run_agentpool(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentpool", *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(autouse=True)
def no_agent_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # CliRunner only overrides the variables it is given: drop any the test runner inherited.
    for opt in OPTIONS:
        monkeypatch.delenv(opt.env, raising=False)
    return


def test_owner_acceptance() -> None:
    done = run_agentpool("owner", "kwok-node-17", "--shards", "7")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "kwok-node-17\t4\n"


def test_owner_many_nodes_and_pool_shards_from_env() -> None:
    done = run_agentpool("owner", "kwok-node-17", "a", "foobar", POOL_SHARDS="7")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "kwok-node-17\t4",
        f"a\t{0xE40C292C % 7}",
        f"foobar\t{0xBF9CF968 % 7}",
    ]


def test_owner_default_is_one_shard() -> None:
    result = CliRunner().invoke(cli, ["owner", "kwok-node-17"])
    assert result.exit_code == 0
    assert result.output == "kwok-node-17\t0\n"


def test_owner_bad_pool_shards_env_exits_2() -> None:
    result = CliRunner().invoke(cli, ["owner", "x"], env={"POOL_SHARDS": "many"})
    assert result.exit_code == 2
    assert "POOL_SHARDS='many'" in result.output


def test_owner_among_members_rendezvous_and_modulo() -> None:
    members = "pool-2,pool-0,pool-1"
    done = run_agentpool("owner", "kwok-node-17", "--members", members)
    assert done.returncode == 0, done.stderr
    best = max(("pool-0", "pool-1", "pool-2"),
               key=lambda m: hashlib.blake2b(f"{m}\0kwok-node-17".encode(), digest_size=8)
               .digest())
    assert done.stdout == f"kwok-node-17\t{best}\n"
    modulo = CliRunner().invoke(cli, ["owner", "kwok-node-17", "a", "--members", members,
                                      "--assignment", "modulo"])
    assert modulo.exit_code == 0
    # Members in ordinal order, indexed by the contract's fnv32a(node) % count.
    assert modulo.output == f"kwok-node-17\tpool-{0x7445EF67 % 3}\na\tpool-{0xE40C292C % 3}\n"
    from_env = CliRunner().invoke(cli, ["owner", "kwok-node-17", "--members", members],
                                  env={"POOL_ASSIGNMENT": "modulo"})
    assert from_env.output == modulo.output.splitlines(keepends=True)[0]


def test_owner_assignment_errors_exit_2() -> None:
    bad_env = CliRunner().invoke(cli, ["owner", "x", "--members", "p-0"],
                                 env={"POOL_ASSIGNMENT": "ring"})
    assert bad_env.exit_code == 2
    assert "POOL_ASSIGNMENT='ring'" in bad_env.output
    bad_flag = CliRunner().invoke(cli, ["owner", "x", "--members", "p-0", "--assignment", "ring"])
    assert bad_flag.exit_code == 2
    assert "modulo or rendezvous" in bad_flag.output
    alone = CliRunner().invoke(cli, ["owner", "x", "--assignment", "modulo"])
    assert alone.exit_code == 2
    assert "--members" in alone.output
    assert CliRunner().invoke(cli, ["owner", "x", "--members", " , "]).exit_code == 2


def test_owner_needs_a_node_and_positive_shards() -> None:
    assert CliRunner().invoke(cli, ["owner"]).exit_code == 2
    assert CliRunner().invoke(cli, ["owner", "x", "--shards", "0"]).exit_code == 2


@pytest.mark.parametrize(
    ("env", "variable", "value"),
    [
        ({"AGENT_MODE": "bogus"}, "AGENT_MODE", "bogus"),
        ({"POOL_SHARDS": "2", "POOL_SHARD_ID": "5", "AGENT_MODE": "pool"}, "POOL_SHARD_ID", "5"),
        ({"AGENT_MODE": "pool", "AGENTPOOL_IMMORTALIZE": "perhaps"}, "AGENTPOOL_IMMORTALIZE",
         "perhaps"),
    ],
)
def test_bad_configuration_exits_2_naming_the_variable(
    env: dict[str, str], variable: str, value: str
) -> None:
    done = run_agentpool(**env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"{variable}={value!r}" in done.stderr
    assert done.stderr.startswith("agentpool: configuration error: ")


@pytest.mark.parametrize(("raw", "variable", "value"), ERRORS, ids=[e[1] for e in ERRORS])
def test_every_configuration_error_exits_2(raw: dict[str, str], variable: str, value: str) -> None:
    result = CliRunner().invoke(cli, [], env=raw)
    assert result.exit_code == 2, result.output
    assert f"configuration error: {variable}=" in result.output
    assert value.strip() in result.output


def test_flags_win_over_the_environment() -> None:
    result = CliRunner().invoke(cli, ["--agent-mode", "bogus"], env={"AGENT_MODE": "pool"})
    assert result.exit_code == 2
    assert "AGENT_MODE='bogus'" in result.output
    result = CliRunner().invoke(
        cli,
        ["--agent-mode", "pool", "--pool-shards", "2", "--pool-shard-id", "9"],
        env={"AGENT_MODE": "bogus", "POOL_SHARD_ID": "0"},
    )
    assert result.exit_code == 2
    assert "POOL_SHARD_ID='9'" in result.output


def test_a_flag_is_read_as_its_variable_is() -> None:
    # Flags and variables meet in one reading: a value Joulie's agent runs with runs here too,
    # with a note (agentpool.config.joulie), whichever way it came.
    settings = settings_from({"SIMULATE_ONLY": "sometimes", "NODE_NAME": "n"})
    assert settings.simulate_only is False
    assert settings.notes == (
        "SIMULATE_ONLY='sometimes': Joulie's agent simulates only for 'true', and enforces "
        "otherwise; using false",
    )


def test_help_lists_every_option_with_its_env_var_and_default() -> None:
    done = run_agentpool("--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # undo click's line wrapping
    for opt in OPTIONS:
        assert opt.flag in text, opt.flag
        assert f"[env {opt.env};" in text, opt.env
        if opt.default is not None:
            assert f"[env {opt.env}; default {opt.default}]" in text.replace("- ", "-"), opt.env
    assert "owner" in text


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("agentpool, version ")


def test_every_console_script_names_a_function_of_the_package() -> None:
    # setup.cfg, not the installed scripts: an editable install keeps the entry points it
    # was installed with, so a moved module would pass here until the next install.
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).parents[1] / "setup.cfg")
    lines = setup["options.entry_points"]["console_scripts"].splitlines()
    scripts = dict(
        (part.strip() for part in line.split("=")) for line in lines if line and "#" not in line
    )
    assert set(scripts) == {"agentpool", "kubectl-agentpool"}
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target


# A setting that parses but cannot be used at start: exit 2 naming it, as for one that
# does not parse, once everything already started is stopped again. Run as a real
# process: the fork server and the private directories exist only there.

KUBECONFIG_NOWHERE = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def start_unusable(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The agent in pool mode with ``env`` over a kubeconfig that loads (nothing is ever
    asked of its server: every case fails before the first request)."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG_NOWHERE)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    base = {"AGENT_MODE": "pool", "KUBECONFIG": str(tmp_path / "kubeconfig"),
            "TMPDIR": str(scratch)}
    # A fork server or worker left running would hold stderr open: run() would time out.
    return run_agentpool(**(base | env))


def assert_config_exit(done: subprocess.CompletedProcess[str], variable: str, value: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"agentpool: configuration error: {variable}={value!r}"), (
        done.stderr
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("variable", ["STATE_DIR", "PROMETHEUS_MULTIPROC_DIR"])
def test_a_directory_under_a_regular_file_exits_2_naming_it(tmp_path: Path, variable: str) -> None:
    (tmp_path / "file").write_text("")
    value = str(tmp_path / "file" / "dir")
    done = start_unusable(tmp_path, **{variable: value})
    assert_config_exit(done, variable, value)
    assert "Not a directory" in done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # private directories removed again


def test_a_metrics_addr_already_in_use_exits_2_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        value = f"127.0.0.1:{taken.getsockname()[1]}"
        done = start_unusable(tmp_path, METRICS_ADDR=value)
    assert_config_exit(done, "METRICS_ADDR", value)
    assert "Address already in use" in done.stderr
    # Started before the listener (fork server, private metrics and state directories):
    # all stopped and removed again.
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    "content",
    [b"junk: [\n", b"just a string\n", b"\x00\xff\xfe", b"apiVersion: v1\nclusters: 5\n", b""],
    ids=["bad-yaml", "scalar", "undecodable", "wrong-types", "empty"],
)
def test_a_kubeconfig_that_does_not_load_exits_2_naming_it(
    tmp_path: Path, content: bytes
) -> None:
    junk = tmp_path / "junk-kubeconfig"
    junk.write_bytes(content)
    done = start_unusable(tmp_path, KUBECONFIG=str(junk))
    assert_config_exit(done, "KUBECONFIG", str(junk))
    assert list((tmp_path / "tmp").iterdir()) == []
