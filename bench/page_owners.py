"""What a worker wrote on each of its private pages: the fork server's object that was there.

For ``pages.py --owners``. Reads both processes' memory (``/proc/<pid>/mem``)
and, for every 8-byte word a worker's private page holds differently from
the fork server's, finds what the fork server has at that address:

- a code object (its bytecode: CPython 3.11+ rewrites it as it runs: inline
  counters, specialised instructions), named by file and function;
- a type object (its version tag, its flags);
- a pymalloc block the fork server has free, or an object made after its
  heap was made immortal (a new object of the worker's in a shared pool);
- another object, by type name;
- nothing that looks like an object (allocator data, a free chunk of the C heap).

An object is recognised by its header as the fork server's heap has it after
``immortal.py``: the immortal reference count (``0xFFFFFFFF``) then a pointer
to a type whose name reads as text. So this works on CPython 3.12 and 3.13
with the immortal heap; elsewhere nearly everything reads "not an object".
Offsets are those of 64-bit CPython 3.12 and 3.13 (``PyCodeObject``: file
name at 112, qualified name at 128; ``PyTypeObject``: name at 24).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

PAGE = 4096
POOL = 16384
IMMORTAL = 0xFFFFFFFF
CODE_FILENAME, CODE_QUALNAME = 112, 128
"""Offsets in PyCodeObject (3.12, 3.13)."""
METATYPES = ("type", "ABCMeta", "EnumType", "_ProtocolMeta", "_TypedDictMeta")


class Memory:
    """Another process's memory, page by page (cached)."""

    def __init__(self, pid: int) -> None:
        self._file = open(f"/proc/{pid}/mem", "rb")  # noqa: SIM115 - closed by close()
        self._pages: dict[int, bytes] = {}

    def close(self) -> None:
        self._file.close()

    def page(self, address: int) -> bytes:
        start = address & ~(PAGE - 1)
        if not 0 < start < 1 << 47:
            return b""
        if start not in self._pages:
            try:
                self._file.seek(start)
                self._pages[start] = self._file.read(PAGE)
            except OSError:
                self._pages[start] = b""
        return self._pages[start]

    def word(self, address: int) -> int | None:
        data = self.page(address)
        offset = address & (PAGE - 1)
        if len(data) < offset + 8:
            return None
        return int(struct.unpack_from("Q", data, offset)[0])

    def text(self, address: int, limit: int = 80) -> str | None:
        """A NUL-terminated string of printable ASCII at ``address``."""
        data = self.page(address)[address & (PAGE - 1):][:limit]
        end = data.find(b"\0")
        if end <= 0:
            return None
        raw = data[:end]
        return raw.decode() if raw.isascii() and raw.decode().isprintable() else None

    def pystr(self, address: int) -> str:
        """A compact ASCII str object's text (3.12: length at 16, data at 40)."""
        length = self.word(address + 16) if address else None
        if length is None or length > 200:
            return "?"
        data = self.page(address + 40)[(address + 40) & (PAGE - 1):][:length]
        return data.decode(errors="replace")


@dataclass
class Owners:
    """Per cause: the pages it is the main cause of, and the words it changed."""

    pages: Counter[str] = field(default_factory=Counter)
    words: Counter[str] = field(default_factory=Counter)
    functions: Counter[str] = field(default_factory=Counter)
    """Code objects written: 'file:function' -> words."""


class _Server:
    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._type_names: dict[int, str | None] = {}

    def type_name(self, address: int) -> str | None:
        if address not in self._type_names:
            name = None
            if address and address % 8 == 0:
                name = self.memory.text(self.memory.word(address + 24) or 0)
            self._type_names[address] = name
        return self._type_names[address]

    def object_at(self, address: int, reach: int = 4096) -> tuple[int, str] | None:
        """The nearest object header at or before ``address``: (its address, type name)."""
        at = address & ~7
        for _ in range(reach // 8):
            count = self.memory.word(at)
            if count is not None and count & 0xFFFFFFFF == IMMORTAL:
                name = self.type_name(self.memory.word(at + 8) or 0)
                if name:
                    return at, name
            at -= 8
        return None

    def free_block(self, address: int) -> bool:
        """Whether ``address`` is in a pymalloc block with no immortal object: free, or
        made after the heap was made immortal."""
        pool = address & ~(POOL - 1)
        header = self.memory.page(pool)
        if len(header) < 48:
            return False
        szidx, nextoffset, maxnextoffset = struct.unpack_from("III", header, 36)
        block = (szidx + 1) * 16
        if szidx >= 32 or maxnextoffset != POOL - block or nextoffset > POOL:
            return False  # not a pool header: the C heap
        start = pool + 48 + (address - pool - 48) // block * block
        for prefix in (0, 16, 32):  # object, GC header, managed-dict pre-header
            count = self.memory.word(start + prefix)
            if count is not None and count & 0xFFFFFFFF == IMMORTAL:
                return False
        return True


def _cause(server: _Server, address: int) -> tuple[str, str | None]:
    """(cause, function written) for one changed word."""
    found = server.object_at(address)
    if found is not None:
        at, name = found
        memory = server.memory
        if name == "code":
            units = memory.word(at + 16) or 0
            if address < at + 192 + 2 * units:
                function = (memory.pystr(memory.word(at + CODE_FILENAME) or 0).rsplit("/", 1)[-1]
                            + ":" + memory.pystr(memory.word(at + CODE_QUALNAME) or 0))
                return "code object (bytecode, counters)", function
        elif name in METATYPES and address - at < 1024:
            return "type object (version tag, flags)", None
    if server.free_block(address):
        return "pymalloc block free in the fork server (a new object in a shared pool)", None
    if found is not None and address - found[0] < 64:
        return f"{found[1]} object's header", None
    return "not an object of the fork server's (allocator data, a free chunk)", None


def owners(worker: int, server: int, pages: list[int]) -> Owners:
    """Attribute every changed word of ``pages`` (the worker's private ones)."""
    mine, theirs = Memory(worker), Memory(server)
    found = Owners()
    inspector = _Server(theirs)
    try:
        for page in pages:
            ours, original = mine.page(page), theirs.page(page)
            if len(original) < PAGE:
                found.pages["new memory (the fork server has nothing there)"] += 1
                continue
            if ours == original:
                found.pages["identical to the fork server's (written and undone)"] += 1
                continue
            causes: Counter[str] = Counter()
            for offset in range(0, PAGE, 8):
                if ours[offset:offset + 8] == original[offset:offset + 8]:
                    continue
                cause, function = _cause(inspector, page + offset)
                causes[cause] += 1
                if function is not None:
                    found.functions[function] += 1
            found.words.update(causes)
            found.pages[causes.most_common(1)[0][0]] += 1
    finally:
        mine.close()
        theirs.close()
    return found
