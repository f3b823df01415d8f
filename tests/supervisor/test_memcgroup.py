"""The agent's own memory cgroup: found, its limit and OOM kills read (rules: memcgroup.py).

Shaped trees stand in for the layouts this machine does not have (cgroup v2 with the
memory controller, a container's namespaced view, a privileged pod's whole tree),
each a ``/proc/self`` pair of files and a cgroup filesystem; the real cgroup v1 of
this machine is read against :mod:`agentpool.sim.cgroups`, which finds it its own way,
and the kernel's own OOM kills are tests/faults/test_memory.py's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentpool.sim import cgroups
from agentpool.supervisor import memcgroup
from agentpool.supervisor.deaths import Deaths
from agentpool.supervisor.memcgroup import MemoryCgroup

MIB = 1 << 20


def _proc(tmp_path: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo)
    return proc


def _v2(directory: Path, limit: str, oom_kills: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "memory.stat").write_text("anon 0\nfile 0\n")
    (directory / "memory.max").write_text(f"{limit}\n")
    (directory / "memory.events").write_text(
        f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kills}\noom_group_kill 0\n")
    return directory


def test_v2_in_a_cgroup_namespace_is_the_mount_root(tmp_path: Path) -> None:
    fs = _v2(tmp_path / "fs", str(256 * MIB), oom_kills=2)
    proc = _proc(tmp_path, "0::/\n",
                 f"30 25 0:26 / {fs} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    found = memcgroup.find(proc)
    assert found == MemoryCgroup(fs, fs, 2)
    assert found.limit_bytes() == 256 * MIB
    assert found.oom_kills() == 2


def test_v2_with_the_host_tree_walks_down_and_takes_the_lowest_limit_above(
    tmp_path: Path
) -> None:
    fs = tmp_path / "fs"
    pod = _v2(fs / "kubepods.slice" / "pod1", str(200 * MIB))
    container = _v2(pod / "cri-abc", "max")
    _v2(fs / "kubepods.slice", "max")
    proc = _proc(tmp_path, "0::/kubepods.slice/pod1/cri-abc\n",
                 f"30 25 0:26 / {fs} rw - cgroup2 cgroup2 rw\n")
    found = memcgroup.find(proc)
    assert found is not None
    assert found.path == container
    assert found.limit_bytes() == 200 * MIB  # the pod's, above the unlimited container


def test_hybrid_v2_without_memory_falls_to_v1_and_v1_unlimited_is_none(tmp_path: Path) -> None:
    unified, memory = tmp_path / "unified", tmp_path / "memory"
    (unified / "job").mkdir(parents=True)
    (unified / "job" / "memory.pressure").write_text("")  # no memory controller here
    own = memory / "job"
    own.mkdir(parents=True)
    (own / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (own / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    space = tmp_path / "with space"
    proc = _proc(
        tmp_path,
        "12:pids:/job\n4:memory:/job\n0::/job\n",
        f"41 31 0:38 / {unified} rw - cgroup2 cgroup2 rw\n"
        f"35 31 0:32 / {memory} rw - cgroup cgroup rw,memory\n"
        f"36 31 0:33 / {str(space).replace(' ', chr(92) + '040')} rw - cgroup cgroup rw,pids\n",
    )
    found = memcgroup.find(proc)
    assert found == MemoryCgroup(own, memory, 1)
    assert found.limit_bytes() is None
    assert found.oom_kills() == 5


def test_a_mount_of_another_tree_is_the_process_own_cgroup(tmp_path: Path) -> None:
    # cgroup v1 in a container: its cgroup bind-mounted at the mount point, while
    # /proc/self/cgroup still names the host's path.
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "memory.limit_in_bytes").write_text(f"{512 * MIB}\n")
    proc = _proc(tmp_path, "9:memory:/kubepods/burstable/pod1/abc\n",
                 f"35 31 0:32 /kubepods/burstable/pod1/abc {memory} ro - cgroup cgroup "
                 "rw,memory\n")
    found = memcgroup.find(proc)
    assert found == MemoryCgroup(memory, memory, 1)
    assert found.limit_bytes() == 512 * MIB
    assert found.oom_kills() is None  # no memory.oom_control: not known


def test_no_cgroup_filesystem_is_no_cgroup(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/\n", "22 1 0:21 / /proc rw - proc proc rw\n")
    assert memcgroup.find(proc) is None
    assert memcgroup.find(tmp_path / "missing") is None


def test_deaths_put_one_sigkill_down_to_each_oom_kill(tmp_path: Path) -> None:
    fs = _v2(tmp_path / "fs", str(128 * MIB))
    deaths = Deaths(MemoryCgroup(fs, fs, 2))
    kill = -signal.SIGKILL
    assert deaths.describe(kill) == "killed by SIGKILL"  # no OOM kill counted
    _v2(fs, str(128 * MIB), oom_kills=3)
    oom = ("OOMKilled: killed by SIGKILL by the kernel's OOM killer, the pod's memory limit "
           "of 128 MiB")
    assert deaths.describe(-signal.SIGTERM) == "killed by SIGTERM"
    # The supervisor's own kill is told as such, and takes one of the three.
    assert deaths.describe(kill, expected=True) == "killed by SIGKILL"
    assert deaths.describe(kill) == oom
    assert deaths.describe(70) == "exited with code 70"
    assert deaths.describe(kill) == oom
    assert deaths.describe(kill) == "killed by SIGKILL"  # three kills explain three deaths
    assert Deaths(None).describe(kill) == "killed by SIGKILL"


@pytest.mark.skipif(not cgroups.available(), reason="needs root and a writable memory cgroup")
def test_the_agent_finds_the_cgroup_it_was_put_in_and_its_limit() -> None:
    with cgroups.MemoryCgroup("agentpool-find", 300 * MIB) as cgroup:
        script = ("from agentpool.supervisor import memcgroup; c = memcgroup.find(); "
                  "print(c.path, c.limit_bytes(), c.oom_kills())")
        out = subprocess.run([*cgroup.wrap(), sys.executable, "-c", script],
                             capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(cgroup.path), str(300 * MIB), "0"]
