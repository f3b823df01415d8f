"""Small integer files under sysfs: read, write, and remember what was there first.

sysfs attributes are tiny text files written in one ``write()``; the kernel
parses the whole buffer at once, so there is no partial-write state to guard
against. Every OSError becomes :class:`SysfsError` naming the path, or
:class:`JournalError` naming the journal when it is the journal's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from agentpool.backends import fencing
from agentpool.errors import JournalError, SysfsError

log = logging.getLogger(__name__)


SYSFS_ATTR_MAX = 4096
"""A sysfs attribute is at most one page; reading more would only follow a file that is
not one (a device node such as /dev/zero behind a bad link never ends)."""


def read_text(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(SYSFS_ATTR_MAX)
    except OSError as exc:
        raise SysfsError(str(path), f"read failed: {exc.strerror or exc}") from exc
    return data.decode("utf-8", "replace").strip()


def read_int(path: Path) -> int:
    text = read_text(path)
    try:
        return int(text)
    except ValueError:
        raise SysfsError(str(path), f"expected an integer, read {text[:40]!r}") from None


def try_read_int(path: Path) -> int | None:
    """The value, or None when the file is missing or unreadable (optional attributes)."""
    try:
        return read_int(path)
    except SysfsError:
        return None


def write_int(path: Path, value: int) -> None:
    """Write one attribute; refused (:class:`FencedError`) past this worker's fence."""
    fencing.permit(f"write of {value} to {path}")
    data = f"{value}\n".encode()
    try:
        # No O_TRUNC: the file holds a number at every moment, even if this process is
        # killed half-way (a pod's teardown SIGKILLs its workers while they restore). A
        # sysfs attribute takes the write whole and ignores sizes; a plain file (a lab's
        # sysfs-shaped tree) keeps whatever followed a shorter value until the truncate.
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(0, "short write")
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError as exc:
        raise SysfsError(str(path), f"write of {value} failed: {exc.strerror or exc}") from exc


class Originals:
    """The value of each host file before this agent first wrote it.

    Restore-on-exit needs the values found at start, and a worker restarted
    after a crash must not mistake its predecessor's throttle for the
    original. So the journal can live in a file (``journal``) that outlives
    the worker process: it is read at start and rewritten atomically (temp
    file + rename) before each first write of a host file.

    Each entry records its owner (the backend that wrote the file), so a
    backend restores exactly its own files.

    A journal that cannot be written (``STATE_DIR`` full) refuses the new entry
    (:class:`JournalError`), and so the write that needed it: a host value is never
    changed without a record that outlives the worker. Dropping an entry needs no
    room: the file keeps it until the next rewrite, and an entry whose value is back
    in place only says what is already true.
    """

    def __init__(self, journal: Path | None = None) -> None:
        self._journal = journal
        self._values: dict[str, tuple[str, int]] = {}
        if journal is not None and journal.exists():
            try:
                loaded = json.loads(journal.read_text())
                self._values = {str(k): (str(o), int(v)) for k, (o, v) in loaded.items()}
            except (OSError, ValueError, AttributeError, TypeError):
                self._values = {}  # a torn journal is ignored; current values become originals

    def remember(self, path: Path, current: int, owner: str) -> bool:
        """Record ``current`` as the original unless one is known; True if it was new."""
        key = str(path)
        if key in self._values:
            return False
        self._values[key] = (owner, current)
        try:
            self._save()
        except OSError as exc:
            del self._values[key]  # unrecorded: the caller must not write the file
            assert self._journal is not None
            raise JournalError(str(self._journal), exc.strerror or str(exc)) from exc
        return True

    def get(self, path: Path) -> int | None:
        entry = self._values.get(str(path))
        return None if entry is None else entry[1]

    def items(self, owner: str | None = None) -> list[tuple[Path, int]]:
        """(file, original) of every entry, or of ``owner``'s."""
        return [
            (Path(k), v)
            for k, (o, v) in sorted(self._values.items())
            if owner is None or o == owner
        ]

    def forget(self, path: Path) -> None:
        if self._values.pop(str(path), None) is not None:
            try:
                self._save()
            except OSError as exc:  # the file keeps the entry: harmless, see the class
                log.warning("journal %s not rewritten (%s): it keeps the entry of %s, "
                            "whose original value is back in place", self._journal,
                            exc.strerror or exc, path)

    def restore(self, owner: str) -> list[str]:
        """Write back the originals of ``owner``'s files; returns the problems, if any.

        A file that could not be written keeps its journal entry, so a later
        attempt (or a restarted worker) still knows the true original.
        """
        problems: list[str] = []
        for path, value in self.items(owner):
            try:
                write_int(path, value)
                self.forget(path)
            except SysfsError as exc:
                problems.append(str(exc))
        return problems

    def clear(self) -> None:
        self._values.clear()
        if self._journal is not None:
            self._journal.unlink(missing_ok=True)

    def _save(self) -> None:
        if self._journal is None:
            return
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._journal.parent, prefix=".originals-")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(self._values, handle)
            os.replace(tmp, self._journal)
        except BaseException:
            # A full disk fails the write or the close: no torn temp file stays behind in
            # a directory that is never wiped.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


class HostApply:
    """One multi-file apply of a backend: journal, write, read back; ``undo()`` on failure."""

    def __init__(self, originals: Originals, owner: str) -> None:
        self._originals = originals
        self._owner = owner
        self._written: list[tuple[Path, int]] = []
        self._fresh: list[Path] = []
        """Files whose journal entry this apply added."""

    def write(self, path: Path, current: int, want: int) -> int:
        """Journal ``current`` as the original (if first), write ``want``, return what
        reads back (the caller judges whether it stuck)."""
        if self._originals.remember(path, current, self._owner):
            self._fresh.append(path)
        write_int(path, want)
        self._written.append((path, current))
        return read_int(path)

    def undo(self) -> None:
        """Put back what this apply wrote, newest first, and drop the journal entries it
        added for files that are back at their original value (a file whose write was
        refused never changed, and must not make every later restore fail on it)."""
        not_undone: set[Path] = set()
        for path, previous in reversed(self._written):
            try:
                write_int(path, previous)
            except SysfsError as exc:
                log.error("could not roll back %s to %d: %s", path, previous, exc)
                not_undone.add(path)
        for path in self._fresh:
            if path not in not_undone:
                self._originals.forget(path)
