"""Put the code objects a worker writes next to each other, so that it copies few pages.

Why: CPython rewrites bytecode in place as it runs it. Every
instruction that could be specialised counts down a counter inline in its
code object each time it runs unspecialised, and specialising writes the
new instruction there too. So running a function writes its code object,
immortal or not, and every shared page that holds one becomes a private
copy in the worker that ran it. A worker runs a few hundred functions, and
after the imports their code objects lie wherever the modules left them,
about one to a page, so each one it runs copies a page: packed together,
they copy few.

How: :func:`written_in_child` forks a child that runs what a new worker
runs (the caller's rehearsal, after the warm-up) and names the code objects
whose bytecode it changed: exactly those a worker writes (a function whose
instructions are all specialised already is only read, and is left where it
is). :func:`pack` makes a fresh copy of each (``code.replace()``), allocated
one right after another on memory nothing else uses (see
:class:`_FreshMemory`), and points every function at its copy; a nested
code object is reached through a copy of its parent's constants. The copies
start unspecialised, so the caller runs the warm-up again to specialise them
before the workers fork.

Best effort, and only on the interpreters it was tested on
(:mod:`~agentpool.worker.forking.interpreters`; :func:`unsupported` says why
not elsewhere). Copies behave as the
originals (same bytecode, names, line table, flags); only the identity of
``function.__code__`` changes, which nothing a worker runs compares.
"""

from __future__ import annotations

import array
import gc
import os
import signal
import types
from collections.abc import Callable, Iterator

from agentpool.worker.forking import allocator, interpreters

PAGE = 4096
TRIES = 2000
"""Copies made (and kept until the end) per code object, looking for fresh memory."""
CHILD_TIMEOUT_S = 30
"""How long :func:`written_in_child`'s child may run (its run takes well under a second)."""
FILLERS = 40_000
"""Copies kept aside in all: a bound, should the allocators not behave as assumed."""


def _functions() -> list[types.FunctionType]:
    return [obj for obj in gc.get_objects() if type(obj) is types.FunctionType]


def _code_tree(functions: list[types.FunctionType]) -> tuple[
    dict[int, types.CodeType], dict[int, types.CodeType]
]:
    """Every code object reachable from a function (id -> code), and each nested one's
    parent (id -> the code whose constants hold it)."""
    codes: dict[int, types.CodeType] = {}
    parents: dict[int, types.CodeType] = {}
    pending = [f.__code__ for f in functions]
    while pending:
        code = pending.pop()
        if id(code) in codes:
            continue
        codes[id(code)] = code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                parents.setdefault(id(const), code)
                pending.append(const)
    return codes, parents


def unsupported() -> str | None:
    """Why nothing is packed on this interpreter (None: it is)."""
    return interpreters.unsupported(interpreters.Step.PACK_CODE)


def supported() -> bool:
    return unsupported() is None


def _adaptive(code: types.CodeType) -> bytes:
    return code._co_code_adaptive  # type: ignore[attr-defined, no-any-return]


def written_in_child(run: Callable[[], object]) -> list[types.CodeType]:
    """Fork; the child runs ``run`` and names the code objects whose bytecode it changed.

    What a forked process writes is what a worker will: the at-fork handlers
    and whatever ``run`` runs, from this process's state, bytecode specialised
    as far as it is here. The child's own objects die with it; nothing it does
    reaches this process but the list. Raises ChildProcessError if it fails or runs
    past :data:`CHILD_TIMEOUT_S`.
    """
    codes = list(_code_tree(_functions())[0].values())
    before = [_adaptive(code) for code in codes]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read_end)
            signal.alarm(CHILD_TIMEOUT_S)  # a child that hangs ends, and nothing is packed
            run()
            changed = array.array("I", (
                i for i, code in enumerate(codes) if _adaptive(code) != before[i]
            ))
            with open(write_end, "wb") as out:
                out.write(changed.tobytes())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with open(read_end, "rb") as answer:
        data = answer.read()
    _, wait_status = os.waitpid(pid, 0)
    if wait_status != 0:
        raise ChildProcessError(f"the child running {run!r} ended with status {wait_status}")
    found = array.array("I")
    found.frombytes(data)
    return [codes[i] for i in found]


def _size(code: types.CodeType) -> int:
    """The bytes CPython allocates for ``code``: a fixed part and two per code unit."""
    return type(code).__basicsize__ + len(code.co_code)


class _FreshMemory:
    """Tells whether a new object lies on memory that held nothing before the packing.

    A small one (pymalloc) is fresh in a pool that was empty when the first copy
    came to it (the constants tuples of copies go there too, nothing else does); a big
    one (malloc) is fresh above the heap's end as it was when the packing began, so it
    was carved from the top of the heap, next to the copy before it. A copy that falls
    anywhere else fills a hole among other objects, and is kept aside as a filler until
    the packing ends, so that the next copy cannot go there. With allocators other than
    those assumed (:func:`allocator.unsupported`) every place is taken as it comes.
    """

    def __init__(self) -> None:
        self.assumed = allocator.unsupported() is None
        self.heap_end = allocator.heap_end()
        self.ours: set[int] = set()
        """Pools the copies fill."""
        self._pools = allocator.Pools()

    def fresh(self, obj: object, size: int) -> bool:
        if not self.assumed:
            return True
        if size > allocator.SMALL:
            return id(obj) >= self.heap_end > 0
        found = self._pools.in_use(obj)
        if found is None:
            return False
        pool, in_use = found
        if pool in self.ours:
            return True
        # 1: this copy alone, in a pool that was empty (no temporary of these lines is
        # of a code object's size, 200 bytes and more).
        if in_use != 1:
            return False
        self.ours.add(pool)
        return True


def _post_order(hot: list[types.CodeType], parents: dict[int, types.CodeType]) -> Iterator[
    types.CodeType
]:
    """The hot code objects and every parent of one, children before their parents."""
    todo: dict[int, types.CodeType] = {}
    for code in hot:
        while code is not None and id(code) not in todo:
            todo[id(code)] = code
            code = parents.get(id(code))  # type: ignore[assignment]
    done: set[int] = set()

    def visit(code: types.CodeType) -> Iterator[types.CodeType]:
        done.add(id(code))
        for const in code.co_consts:
            if isinstance(const, types.CodeType) and id(const) in todo and id(const) not in done:
                yield from visit(const)
        yield code

    for code in list(todo.values()):
        if id(code) not in done:
            yield from visit(code)


def pack(hot: list[types.CodeType]) -> tuple[int, int]:
    """Copy ``hot`` (and their parents) next to each other; functions run the copies.

    Returns (code objects copied, pages they span). Call before the heap is made
    immortal and frozen, and run the warm-up again afterwards.
    """
    functions = _functions()
    _, parents = _code_tree(functions)
    order = list(_post_order(hot, parents))
    # Everything the loop below stores into is allocated before it begins: a container
    # growing between two copies would take the memory the next copy needs.
    copies: dict[int, types.CodeType | None] = dict.fromkeys(map(id, order))
    fillers: list[types.CodeType | None] = [None] * FILLERS
    used = 0
    memory = _FreshMemory()
    for code in order:
        consts = None
        if any(copies.get(id(c)) is not None for c in code.co_consts):
            # A new tuple only where a constant changed: it is allocated among the copies.
            consts = tuple(copies.get(id(c)) or c for c in code.co_consts)
        size = _size(code)
        for _ in range(TRIES):
            copy = code.replace() if consts is None else code.replace(co_consts=consts)
            if memory.fresh(copy, size) or used == len(fillers):
                break
            fillers[used] = copy
            used += 1
        copies[id(code)] = copy
    for function in functions:
        new = copies.get(id(function.__code__))
        if new is not None:
            function.__code__ = new
    del fillers  # their memory goes back to the allocators, for whatever comes next
    pages = {
        page
        for copy in copies.values()
        if copy is not None
        for page in range(id(copy) // PAGE, (id(copy) + _size(copy) - 1) // PAGE + 1)
    }
    return len(copies), len(pages)
