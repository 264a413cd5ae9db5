#!/usr/bin/env python3
"""Write the synchronous modules of sluicemq from their asyncio sources.

    python tools/async_to_sync.py            # rewrite the generated files
    python tools/async_to_sync.py --check    # exit 1 (with a diff) if one is stale

The async module is the one to edit; its sync twin is generated (FILES below):

    aio.py         -> client.py
    aio_worker.py  -> worker.py

The rewrite is guided by the ``ast`` module (stdlib only) but done on the source
text, so that comments and layout survive. Three passes, each re-parsing:

1. ``if True:  # ASYNC`` blocks (the comment is required) keep only their
   ``else:`` branch, dedented one level (nothing, without one). This is how a
   part that differs genuinely is written once for each side, in any block,
   class bodies included. The else branch is written in sync form.
2. ``except asyncio.CancelledError`` clauses are removed (a thread is never
   cancelled), as are the imports listed in DROP_IMPORTS.
3. ``async def``/``async with``/``async for`` lose ``async``, ``await`` goes,
   and the names of NAMES are renamed wherever they occur as a name, an
   attribute, an imported name, a module imported from, a function or a class
   defined, and (as whole words) in docstrings. Each file's PHRASES then
   rewrite phrases of its docstrings; a phrase not found is an error, so that
   an edit of the async docstring cannot silently leave async wording behind.

What differs between asyncio and threads in the worker (events, conditions with
a timeout, spawning, handler pools, signals) lives in the hand-written modules
``_acompat.py`` and ``_compat.py``, whose names map one to one (NAMES).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "src" / "sluicemq"

# Async name -> sync name, for names, attributes, imports and definitions.
NAMES = {
    # asyncio and the standard library
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    # psycopg and psycopg_pool
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    # sluicemq
    "aio": "client",
    "aio_worker": "worker",
    "AsyncClient": "Client",
    "AsyncWorker": "Worker",
    "AsyncHandler": "Handler",
    # sluicemq._acompat -> sluicemq._compat (hand-written, one name each)
    "_acompat": "_compat",
    "AEvent": "Event",
    "ACondition": "Condition",
    "AHandlers": "Handlers",
    "aspawn": "spawn",
    "ATask": "Task",
    "ahalt": "halt",
    "ajoin": "join",
    "asleep": "sleep",
    "aresolve": "resolve",
}

# Modules imported by the async source that the sync one does not use.
DROP_IMPORTS = {"asyncio"}

# Exception classes whose except clauses exist only in async code.
DROP_EXCEPT = {"asyncio.CancelledError"}


@dataclass
class Target:
    """One generated file: its async source and the docstring phrases that differ."""

    source: str
    output: str
    phrases: list[tuple[str, str]] = field(default_factory=list)


FILES = [
    Target(
        "aio.py",
        "client.py",
        [
            ("The asyncio client:", "The synchronous client:"),
            ("through a psycopg async pool.", "through a psycopg pool."),
            (
                "(the client never\n    closes it; open it first) or a connection string: then the client makes\n"
                "    and owns a pool, opened by :meth:`open` or ``async with`` and closed by\n"
                "    :meth:`close`. Safe for use from many tasks.",
                "(the client never\n    closes it) or a connection string (the client makes and owns a pool,\n"
                "    closed by :meth:`close` or ``with``). Safe for use from many threads.",
            ),
        ],
    ),
    Target(
        "aio_worker.py",
        "worker.py",
        [
            (
                "AsyncWorker: consume queues with async handlers on one event loop.",
                "Worker: consume queues with handlers on threads.",
            ),
            ("concurrency=50)", "concurrency=8)"),
            ('@worker.handler("emails")\n    async def', '@worker.handler("emails", lease=30)\n    def'),
            ("asyncio.run(worker.run())", "worker.run()"),
            ("to one task in order", "to one thread in order"),
            ("on a\ntask of their own", "on a\nthread of their own"),
            (
                "then cancels those still running and gives their messages back for\nimmediate redelivery.",
                "then gives their messages back for immediate redelivery\n(a thread cannot be killed: a handler "
                "still running then finishes, and its\noutcome is ignored).",
            ),
            ("Runs the async handlers registered with :meth:`handler` as tasks.", "Runs the handlers registered "
             "with :meth:`handler` on threads."),
            ("(a plain function, called on the worker's loop)", "(on the handler's thread)"),
            (
                "(when ``handle_signals``) or :meth:`stop`,\n        then shut down gracefully. Re-raises an error "
                "that stopped the worker (a\n        queue or group that does not exist).",
                "(when called from the main thread and\n        ``handle_signals``) or :meth:`stop`, then shut down "
                "gracefully. Re-raises\n        an error that stopped the worker (a queue or group that does not exist).",
            ),
            (
                "\n\nworker.py (Worker) is generated from this file by tools/async_to_sync.py:\nedit this one. What "
                "differs between tasks and threads is in _acompat.py and\n_compat.py, or in the ``if True:  # ASYNC`` "
                "blocks below (their ``else:``\nbranch is the sync code).",
                "",
            ),
            ("One route's fetch loop, acker, handler tasks and heartbeat.", "One route's fetch loop, acker, handler "
             "threads and heartbeat."),
        ],
    ),
]

HEADER = (
    "# Generated from {source} by tools/async_to_sync.py: do not edit this file.\n"
    "# Edit {source} and run `make generate-python` (or python tools/async_to_sync.py).\n"
)


class GenerateError(Exception):
    """The async source uses a form the generator does not handle."""


@dataclass(order=True)
class Edit:
    """Replace source[start:end] with text (offsets into the whole source)."""

    start: int
    end: int
    text: str


class Source:
    """A module's text with offsets for ast positions."""

    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name
        self.tree = ast.parse(text, filename=name)
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        """The offset of a (1-based line, UTF-8 byte column) position."""
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        a = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        b = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return a, b

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Whole lines first..last (1-based, inclusive), with their newlines."""
        return self.starts[first - 1], self.starts[last]

    def apply(self, edits: list[Edit]) -> str:
        out, pos = [], 0
        for e in sorted(edits):
            if e.start < pos:
                raise GenerateError(f"{self.name}: overlapping edits at offset {e.start}")
            out.append(self.text[pos : e.start])
            out.append(e.text)
            pos = e.end
        out.append(self.text[pos:])
        return "".join(out)

    def fail(self, node: ast.AST, msg: str) -> GenerateError:
        return GenerateError(f"{self.name}:{getattr(node, 'lineno', '?')}: {msg}")


def dedent(text: str, by: int) -> str:
    """Remove ``by`` columns of indentation from every non-blank line."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip():
            if line[:by].strip():
                raise GenerateError(f"cannot dedent {line!r} by {by}")
            line = line[by:]
        out.append(line)
    return "".join(out)


# -- pass 1: if True:  # ASYNC ... else: ... -------------------------------


def is_async_block(src: Source, node: ast.AST) -> bool:
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Constant) and node.test.value is True):
        return False
    return bool(re.search(r"#\s*ASYNC\b", src.lines[node.lineno - 1]))


def resolve_async_blocks(src: Source) -> str:
    edits = []
    for node in ast.walk(src.tree):
        if not is_async_block(src, node):
            continue
        assert isinstance(node, ast.If)
        if any(is_async_block(src, n) for stmt in node.body + node.orelse for n in ast.walk(stmt)):
            raise src.fail(node, "nested `if True:  # ASYNC` blocks are not supported")
        start, end = src.line_span(node.lineno, node.end_lineno or node.lineno)
        if not node.orelse:
            last = node.end_lineno or node.lineno
            before = src.lines[node.lineno - 2] if node.lineno > 1 else "x"
            if not before.strip() and last < len(src.lines) and not src.lines[last].strip():
                end = src.line_span(last + 1, last + 1)[1]  # and one of the blank lines around it
            edits.append(Edit(start, end, ""))
            continue
        else_line = next(
            (
                i
                for i in range(node.body[-1].end_lineno or 0, node.orelse[0].lineno)
                if re.fullmatch(r"else\s*:\s*(#.*)?", src.lines[i].strip())
            ),
            None,
        )
        if else_line is None:
            raise src.fail(node, "an `if True:  # ASYNC` block takes a plain `else:` (no elif), on a line of its own")
        body_start, _ = src.line_span(else_line + 2, else_line + 2)
        indent = node.orelse[0].col_offset - node.col_offset
        edits.append(Edit(start, end, dedent(src.text[body_start:end], indent).lstrip("\n")))
    return src.apply(edits)


# -- pass 2: drop async-only except clauses and imports --------------------


def drop_async_only(src: Source) -> str:
    edits = []
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Try):
            for h in node.handlers:
                if h.type is not None and ast.unparse(h.type) in DROP_EXCEPT:
                    if len(node.handlers) == 1 and not node.finalbody:
                        raise src.fail(h, "a try whose only clause is async-only: write it in an ASYNC block")
                    edits.append(Edit(*src.line_span(h.lineno, h.end_lineno or h.lineno), ""))
        elif isinstance(node, ast.Import) and all(a.name in DROP_IMPORTS for a in node.names):
            edits.append(Edit(*src.line_span(node.lineno, node.end_lineno or node.lineno), ""))
    return src.apply(edits)


# -- pass 3: keywords, names, docstrings -----------------------------------

WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, NAMES), key=len, reverse=True)) + r")\b")


def docstrings(tree: ast.Module) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    yield first.value


def keyword(src: Source, node: ast.AST, word: str) -> Edit:
    """Remove ``word`` and the blanks after it at the node's start."""
    start = src.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
    m = re.compile(re.escape(word) + r"\s+").match(src.text, start)
    if m is None:
        raise src.fail(node, f"expected {word!r} here")
    return Edit(start, m.end(), "")


def rename_at(src: Source, node: ast.AST, pattern: str, name: str) -> Edit:
    """Rename ``name`` where ``pattern`` (a regex with one group) matches from the node's start."""
    start = src.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
    m = re.compile(pattern).match(src.text, start)
    if m is None or m.group(1) != name:
        raise src.fail(node, f"cannot find {name!r}")
    return Edit(m.start(1), m.end(1), NAMES[name])


def sync_edits(src: Source, phrases: list[tuple[str, str]], used: set[str]) -> list[Edit]:
    edits: list[Edit] = []
    docs = {id(d) for d in docstrings(src.tree)}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.AsyncFunctionDef):
            edits.append(keyword(src, node, "async"))
        elif isinstance(node, (ast.AsyncWith, ast.AsyncFor)):
            edits.append(keyword(src, node, "async"))
        elif isinstance(node, ast.Await):
            edits.append(keyword(src, node, "await"))
        if isinstance(node, ast.Name) and node.id in NAMES:
            edits.append(Edit(*src.span(node), NAMES[node.id]))
        elif isinstance(node, ast.Attribute) and node.attr in NAMES:
            _, end = src.span(node)
            if src.text[end - len(node.attr) : end] != node.attr:
                raise src.fail(node, f"cannot find attribute {node.attr!r}")
            edits.append(Edit(end - len(node.attr), end, NAMES[node.attr]))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in NAMES:
            edits.append(rename_at(src, node, r"(?:async\s+)?(?:def|class)\s+(\w+)", node.name))
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".")
            if any(part in NAMES for part in mod):
                new = ".".join(NAMES.get(p, p) for p in mod)
                m = re.compile(r"from\s+\.*([\w.]+)").match(src.text, src.offset(node.lineno, node.col_offset))
                if m is None or m.group(1) != node.module:
                    raise src.fail(node, "cannot find the module imported from")
                edits.append(Edit(m.start(1), m.end(1), new))
            for a in node.names:
                if a.name in NAMES:
                    edits.append(Edit(*src.span(a), NAMES[a.name] + (f" as {a.asname}" if a.asname else "")))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
            start, end = src.span(node)  # e.g. in __all__
            edits.append(Edit(start, end, src.text[start:end].replace(node.value, NAMES[node.value])))
        elif isinstance(node, ast.Constant) and id(node) in docs:
            start, end = src.span(node)
            text = src.text[start:end]
            for old, new in phrases:
                if old in text:
                    used.add(old)
                    text = text.replace(old, new)
            edits.append(Edit(start, end, WORDS.sub(lambda m: NAMES[m.group(1)], text)))
    return edits


def generate(target: Target, pkg: Path = PKG) -> str:
    """The sync module for one target, from its async source in ``pkg``."""
    text = (pkg / target.source).read_text()
    text = resolve_async_blocks(Source(text, target.source))
    text = drop_async_only(Source(text, target.source))
    used: set[str] = set()
    src = Source(text, target.source)
    text = src.apply(sync_edits(src, target.phrases, used))
    missing = [old for old, _ in target.phrases if old not in used]
    if missing:
        raise GenerateError(f"{target.source}: docstring phrases not found (update PHRASES): {missing}")
    out = Source(text, target.output)
    for node in ast.walk(out.tree):
        if isinstance(node, (ast.AsyncFunctionDef, ast.AsyncWith, ast.AsyncFor, ast.Await)):
            raise out.fail(node, "async code left after the rewrite")
        if is_async_block(out, node):
            raise out.fail(node, "an ASYNC block left after the rewrite")
    return HEADER.format(source=target.source) + text


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the generated files are current")
    opt = ap.parse_args()
    stale = 0
    for target in FILES:
        try:
            new = generate(target)
        except GenerateError as err:
            print(f"async_to_sync: {err}", file=sys.stderr)
            return 2
        out = PKG / target.output
        old = out.read_text() if out.exists() else ""
        if old == new:
            continue
        if opt.check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(out), f"{out} (generated)")
            )
        else:
            out.write_text(new)
            print(f"async_to_sync: wrote {out}")
    if stale:
        print(
            f"async_to_sync: {stale} generated file(s) not current: edit the async sources, then run "
            "`make generate-python`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
