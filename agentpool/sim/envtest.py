"""A real etcd + kube-apiserver on 127.0.0.1, from envtest binaries.

Owns the lifecycle of a throwaway control plane: free ports, a data dir, a
service-account key, static bearer tokens for named users, RBAC on, the
legacy insecure port off; it waits for ``/readyz``, writes one kubeconfig per
user, and on ``stop()`` leaves no process and no data dir behind. For fault
tests it can kill both processes as a crash would and start them again on the
same ports and data (:meth:`EnvtestServer.kill`, :meth:`EnvtestServer.restart`),
and keep an audit log of every request, by user (:meth:`EnvtestServer.audit`). The
binaries are found the way controller-runtime's envtest finds them: the
directory named by ``KUBEBUILDER_ASSETS`` holds ``etcd`` and
``kube-apiserver`` (``setup-envtest use -p path <version>`` prints one).

It never imports the ``kubernetes`` client: the admin facade
(:class:`~agentpool.sim.clusterapi.ClusterApi`) speaks plain HTTPS, so
tests that check the client-side code against this server do not share code
with it. The serving certificate is the self-signed one kube-apiserver makes
in ``--cert-dir``; kubeconfigs trust exactly that file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentpool.sim.clusterapi import ClusterApi
from agentpool.sim.polling import wait_until

ASSETS_ENV = "KUBEBUILDER_ASSETS"
ADMIN = "admin"
HOW_TO_GET = (
    "set KUBEBUILDER_ASSETS to a directory holding etcd and kube-apiserver "
    "(`setup-envtest use -p path 1.20.x` where the internet is reachable, or build them "
    "from Debian's kubernetes source package)"
)
START_TIMEOUT_S = 90.0
"""Cold start on 2 busy cores took up to ~15 s here; etcd and the apiserver race for CPU."""


class EnvtestUnavailableError(RuntimeError):
    """No binaries: tests skip with this message, which says how to get them."""


def find_assets(environ: Mapping[str, str] | None = None) -> Path:
    """The directory with ``etcd`` and ``kube-apiserver``, or EnvtestUnavailableError."""
    env = os.environ if environ is None else environ
    value = env.get(ASSETS_ENV, "")
    if not value:
        raise EnvtestUnavailableError(f"{ASSETS_ENV} is not set: {HOW_TO_GET}")
    assets = Path(value)
    for binary in ("etcd", "kube-apiserver"):
        if not os.access(assets / binary, os.X_OK):
            raise EnvtestUnavailableError(
                f"{assets / binary} is missing or not executable: {HOW_TO_GET}"
            )
    return assets


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class User:
    """A static-token user (``--token-auth-file``); RBAC matches on name and groups."""

    name: str
    token: str
    groups: tuple[str, ...] = ()


def service_account_user(namespace: str, name: str) -> tuple[str, tuple[str, ...]]:
    """The user name and groups a ServiceAccount's token authenticates as."""
    return (
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


class EnvtestServer:
    """etcd + kube-apiserver subprocesses; ``with EnvtestServer() as srv: ...``.

    ``users`` maps extra user names to their groups; each gets a token and a
    kubeconfig (:meth:`kubeconfig`). The admin user is in ``system:masters``.
    Static tokens are read once at start, so users are declared up front.
    """

    def __init__(
        self,
        assets: Path | None = None,
        users: Mapping[str, Sequence[str]] | None = None,
        workdir: Path | None = None,
        audit: bool = False,
    ) -> None:
        self.assets = assets or find_assets()
        self.audited = audit
        """Whether kube-apiserver writes an audit log (:meth:`audit`)."""
        self._tmp = None if workdir else tempfile.mkdtemp(prefix="agentpool-envtest-")
        self.workdir = Path(workdir or self._tmp)  # type: ignore[arg-type]
        self.users = {ADMIN: User(ADMIN, "admin-" + os.urandom(8).hex(), ("system:masters",))}
        for index, (name, groups) in enumerate((users or {}).items()):
            self.users[name] = User(name, f"user{index}-" + os.urandom(8).hex(), tuple(groups))
        self.port = _free_port()
        self._etcd_ports = (_free_port(), _free_port())
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """kube-apiserver's self-signed serving certificate (it carries its own CA)."""
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> EnvtestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> EnvtestServer:
        try:
            self._write_credentials()
            self._start_etcd()
            self.start_apiserver()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_credentials(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        key = self.workdir / "sa.key"
        if not key.exists():
            openssl = shutil.which("openssl")
            if openssl is None:
                raise EnvtestUnavailableError("openssl is needed to make the service-account key")
            subprocess.run(
                [openssl, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
        lines = [f'{u.token},{u.name},{u.name},"{",".join(u.groups)}"' for u in self.users.values()]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        # Every request once, when its answer is complete (a watch: also when it starts).
        (self.workdir / "audit-policy.json").write_text(json.dumps({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"], "rules": [{"level": "Metadata"}],
        }))

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        with log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _start_etcd(self) -> None:
        client, peer = self._etcd_ports
        self._etcd = self._spawn("etcd", [
            str(self.assets / "etcd"),
            "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",
        ])

    def start_apiserver(self, cpu_share: float = 1.0) -> None:
        """Start (or restart after :meth:`stop_apiserver`) kube-apiserver on the same port.

        ``cpu_share`` below 1: until it is ready, it and etcd run only that share of the
        time (:class:`_Throttle`), as on a control-plane node short of CPU, so that each
        phase of its start (CRD paths answering 503 "server is starting", then 404
        until the CRDs' discovery is registered, ``/readyz`` failing for seconds after
        that) lasts long enough for clients to meet it.
        """
        if not 0 < cpu_share <= 1:
            raise ValueError(f"cpu_share must be in (0, 1], not {cpu_share}")
        sa_key = str(self.workdir / "sa.key")
        self._apiserver = self._spawn("kube-apiserver", [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self._etcd_ports[0]}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            *([f"--audit-policy-file={self.workdir / 'audit-policy.json'}",
               f"--audit-log-path={self.audit_log}", "--audit-log-format=json"]
              if self.audited else []),
        ])
        slowed = [p.pid for p in (self._apiserver, self._etcd) if p is not None]
        throttles = [_Throttle(pid, cpu_share) for pid in slowed] if cpu_share < 1 else []
        try:
            wait_until(self._ready, START_TIMEOUT_S / cpu_share, interval=0.2)
        finally:
            for throttle in throttles:
                throttle.stop()

    def _ready(self) -> bool:
        for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
            if proc is not None and proc.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
        if not self.ca_file.exists():
            return False
        request = urllib.request.Request(
            self.url + "/readyz", headers={"Authorization": f"Bearer {self.users[ADMIN].token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2, context=self.ssl_context()) as answer:
                return bool(answer.status == 200)
        except OSError:  # refused, reset, 503 while starting, TLS not up yet
            return False

    def stop_apiserver(self) -> None:
        """Stop only the apiserver: etcd keeps the data, as in a control-plane restart."""
        _stop(self._apiserver)
        self._apiserver = None

    def kill(self) -> None:
        """SIGKILL kube-apiserver and etcd, as a crash of the control plane: connections
        reset, nothing said to clients. The data stays for :meth:`restart`."""
        for proc in (self._apiserver, self._etcd):
            _stop(proc, timeout=0.0)
        self._apiserver = self._etcd = None

    def restart(self, cpu_share: float = 1.0) -> None:
        """Start etcd and kube-apiserver again, new processes on the same ports and data
        (``cpu_share``: see :meth:`start_apiserver`)."""
        if self._etcd is None:
            self._start_etcd()
        self.start_apiserver(cpu_share)

    def stop(self) -> None:
        _stop(self._apiserver)
        _stop(self._etcd)
        self._apiserver = self._etcd = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- clients -----------------------------------------------------------------

    def kubeconfig(self, path: Path, user: str = ADMIN) -> Path:
        """Write a kubeconfig for ``user`` (JSON, which is YAML) and return its path."""
        return self._write_kubeconfig(path, user, self.users[user].token)

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.url, "certificate-authority": str(self.ca_file),
            }}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
            "current-context": "envtest",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(config, indent=2) + "\n")
        partial.replace(path)
        return path

    def audit(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log so far (``audit.k8s.io/v1`` Events: ``auditID``, ``stage``, ``verb``,
        ``requestURI``, ``user``, ``requestReceivedTimestamp``...), of ``user`` if given.

        Every process the server ran wrote to the same file. A line still being written
        is left out.
        """
        if not self.audited:
            raise RuntimeError("this server keeps no audit log: EnvtestServer(audit=True)")
        events = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.audit_log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if user is None or (event.get("user") or {}).get("username") == user:
                        events.append(event)
        return events

    def api(self, user: str = ADMIN) -> ClusterApi:
        """The direct API (plain HTTPS) as ``user``."""
        return ClusterApi(self.url, self.users[user].token, self.ssl_context())

    def service_account_kubeconfig(
        self, path: Path, namespace: str, name: str, seconds: int = 3600
    ) -> Path:
        """A kubeconfig with a TokenRequest token of that ServiceAccount (as a pod gets).

        The ServiceAccount must exist; RBAC then sees
        ``system:serviceaccount:<namespace>:<name>`` exactly as in a cluster.
        """
        answer = self.api().request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}},
        )
        return self._write_kubeconfig(path, f"{namespace}:{name}", answer["status"]["token"])

    def version(self) -> tuple[int, int]:
        """(major, minor) of the running server, for skipping newer features by version."""
        info = self.api().request("GET", "/version")
        return int(info["major"]), int(str(info["minor"]).rstrip("+"))


class _Throttle:
    """Lets a process run only ``share`` of each :data:`SLICE_S` (SIGCONT, then SIGSTOP),
    from a thread, until :meth:`stop` (which leaves it running)."""

    SLICE_S = 0.05

    def __init__(self, pid: int, share: float) -> None:
        self._pid = pid
        self._share = share
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="envtest-throttle", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                os.kill(self._pid, signal.SIGCONT)
                if self._done.wait(self.SLICE_S * self._share):
                    break
                os.kill(self._pid, signal.SIGSTOP)
                self._done.wait(self.SLICE_S * (1 - self._share))
        except ProcessLookupError:
            return  # it exited: the start fails and says why
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGCONT)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGCONT)


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it past ``timeout`` (at once for 0), and reap."""
    if proc is None or proc.poll() is not None:
        return
    if timeout > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
