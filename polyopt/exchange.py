"""Exchanging Scops and schedules with other polyhedral tools: Polly's JSCoP and OpenSCoP.

Export writes a Scop with a schedule (a :class:`~polyopt.Schedule`, or a Scop / kernel with its
original order) in either format; import reads a schedule back onto the same Scop as a
``Schedule`` that the verifier has checked and ``po.compile(kernel, schedule=...)`` compiles.
So a schedule that Pluto wrote, or one edited by hand for Polly, runs through polyopt's code
generator next to polyopt's own schedules.

* **JSCoP** (Polly's ``-polly-export-jscop`` / ``-polly-import-jscop``): JSON with ``name``,
  ``context`` (isl text), ``arrays`` (``name``, ``sizes``, ``type`` as LLVM spells it) and
  ``statements``, each with ``name``, ``domain`` (isl set), ``schedule`` (isl map) and
  ``accesses`` (``kind`` "read"/"write", ``relation``). Statements are matched by name.
* **OpenSCoP** (the openscop library's text format, written by Clan, read by Pluto's ``polycc
  --readscop`` and Candl): relations as constraint matrices, columns e/i, output dimensions,
  input dimensions, local (existential) dimensions, parameters, constant. Statements are
  matched by position (the format has no statement names); array names come from the
  ``<arrays>`` extension. Pluto reads only scatterings that are equalities without local
  dimensions, one row per time dimension: untiled schedules are written that way; tiled or
  strided ones need local dimensions (valid OpenSCoP, which Pluto refuses).

On import the file must describe the Scop: the same statements (by name or position), the
same domains, a context that allows every parameter value the Scop's does, and, where the file
gives them, the same accesses (reads of 0-d arrays named like a scalar argument aside: Clan and
Polly model scalars so) -- polyopt imports schedules only, so a file that changes anything else
is refused with what differs (:class:`~polyopt.errors.ExchangeError`). Statements with fewer time dimensions than others are
padded with trailing zeros, as Pluto does. The schedule becomes one band over the flat map
(``insert_partial_schedule``), is checked by :func:`~polyopt.analysis.verify` (an illegal one raises
:class:`~polyopt.IllegalScheduleError` with the verifier's witness), and, with
``parallel=True`` (the default), its outermost loop that the dependences prove parallel is
marked so, as Pluto's output marks its loops: coincidence is computed from the dependences
(:func:`polyopt.transform.tree.mark_coincident`), dimensions constant per statement are not loops
and are never marked, and the marks are checked again (:func:`polyopt.analysis.verify.check_parallel`).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Union

import islpy as isl

from polyopt.analysis.deps import dependences
from polyopt.errors import ExchangeError, ScheduleError
from polyopt.analysis.expr import to_source
from polyopt.islutil import ISL_LOCK, coalesced, maps_of
from polyopt.targets.cache import scop_of
from polyopt.schedulers.postpass import mark_parallel
from polyopt.transform.schedule import Schedule
from polyopt.transform.tree import mark_coincident
from polyopt.analysis.scop import Scop, Statement
from polyopt.analysis.verify import check_parallel, verify

_D = isl.dim_type
#: OpenSCoP's column order after the e/i column, as isl dimension types.
_COLUMNS = (_D.out, _D.in_, _D.div, _D.param, _D.cst)

#: Polly writes array element types as LLVM spells them (integers carry no sign).
LLVM_TYPES = {"f64": "double", "f32": "float", "i8": "i8", "u8": "i8", "i16": "i16", "u16": "i16",
              "i32": "i32", "u32": "i32", "i64": "i64", "u64": "i64"}

if TYPE_CHECKING:
    from polyopt.frontends.dsl import Kernel

#: What export takes: a Schedule, or a Scop or kernel (in its original order).
Exportable = Union[Schedule, Scop, "Kernel"]
PathLike = Union[str, "os.PathLike[str]"]


# ----- what is exported ------------------------------------------------------------------------

def _scop_and_tree(source: Exportable) -> tuple[Scop, isl.Schedule]:
    """The Scop and schedule tree of a Schedule, or of a Scop / kernel in its original order."""
    if isinstance(source, Schedule):
        return source.scop, source.tree
    scop = scop_of(source)
    return scop, scop.schedule


def _statement_schedules(scop: Scop, tree: isl.Schedule) -> dict[str, isl.Map]:
    """Each statement's flat schedule map, simplified in the context of its domain (the map
    restricted to the domain is what the schedule means; the rest is left out of the text)."""
    flat = tree.get_map().intersect_domain(tree.get_domain()).intersect_domain(scop.domain)
    by_name = {m.get_tuple_name(_D.in_): m for m in maps_of(flat)}
    result = {}
    for stmt in scop.statements:
        if stmt.name not in by_name:
            raise ScheduleError(f"{scop.name}: the schedule does not run statement {stmt.name}")
        result[stmt.name] = coalesced(by_name[stmt.name].gist_domain(_domain(scop, stmt)))
    return result


def _domain(scop: Scop, stmt: Statement) -> isl.Set:
    return stmt.domain.intersect_params(scop.context)


# ----- JSCoP -----------------------------------------------------------------------------------

def to_jscop(source: Exportable) -> dict:
    """The JSCoP (Polly's JSON) of a Scop with its schedule: a dict for :func:`json.dump`.

    ``source`` is a :class:`~polyopt.Schedule`, or a Scop or kernel (its original order)."""
    with ISL_LOCK:
        scop, tree = _scop_and_tree(source)
        schedules = _statement_schedules(scop, tree)
        return {
            "name": scop.name,
            "context": str(scop.context),
            "arrays": [{"name": a.name, "sizes": list(a.shape), "type": LLVM_TYPES[a.dtype.name]}
                       for a in scop.arrays.values()],
            "statements": [{
                "name": stmt.name,
                "domain": str(stmt.domain),
                "schedule": str(schedules[stmt.name]),
                "accesses": [{"kind": "write" if ref.is_write else "read",
                              "relation": str(coalesced(ref.relation.gist_domain(_domain(scop, stmt))))}
                             for ref in stmt.accesses],
            } for stmt in scop.statements],
        }


def write_jscop(source: Exportable, path: PathLike) -> None:
    """Write :func:`to_jscop` of ``source`` to ``path`` (indented as Polly writes it)."""
    Path(path).write_text(json.dumps(to_jscop(source), indent=3) + "\n")


def schedule_from_jscop(scop: Scop | Kernel, jscop: dict | PathLike, *, parallel: bool = True) -> Schedule:
    """The schedule of a JSCoP file (a path, or the dict :func:`to_jscop` gives) as a verified
    :class:`~polyopt.Schedule` of ``scop`` (a Scop or kernel).

    The file must describe ``scop`` (statement names, domains, context; accesses and arrays
    where given), else :class:`~polyopt.errors.ExchangeError` says what differs; an illegal
    schedule raises :class:`~polyopt.IllegalScheduleError` with the verifier's witness.
    ``parallel`` marks the outermost loop the dependences prove parallel (module docstring).
    """
    scop = scop_of(scop)
    where = "<jscop>" if isinstance(jscop, dict) else str(jscop)
    data = jscop if isinstance(jscop, dict) else _read_json(where)
    with ISL_LOCK:
        statements = _jscop_statements(scop, data, where)
        if "context" in data:
            _check_context(scop, _parse(isl.Set, data["context"], "the context", where), where)
        if "arrays" in data:
            _check_jscop_arrays(scop, data["arrays"], where)
        maps = {}
        for stmt in scop.statements:
            entry = statements[stmt.name]
            what = f"statement {stmt.name}"
            _check_domain(scop, stmt, _parse(isl.Set, entry["domain"], f"the domain of {what}", where), where)
            if "accesses" in entry:
                _check_accesses(scop, stmt, _jscop_accesses(entry["accesses"], what, where), where)
            schedule = _parse(isl.Map, entry["schedule"], f"the schedule of {what}", where)
            maps[stmt.name] = _statement_map(scop, stmt, schedule, where)
        trace = f"jscop({'<dict>' if isinstance(jscop, dict) else repr(where)})"
        return _imported_schedule(scop, maps, "jscop", trace, parallel, where)


def _read_json(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ExchangeError(f"not JSON: {exc.msg}", source_name=path, line=exc.lineno, column=exc.colno) from None
    if not isinstance(data, dict):
        raise ExchangeError("a JSCoP file is a JSON object", source_name=path)
    return data


def _jscop_statements(scop: Scop, data: dict, where: str) -> dict[str, dict]:
    """The file's statements by name, each with the keys import needs; the names must be the
    Scop's (Polly matches by position; by name, a reordered file still imports)."""
    entries = data.get("statements")
    if not isinstance(entries, list):
        raise ExchangeError("no list 'statements'", source_name=where)
    found: dict[str, dict] = {}
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ExchangeError(f"statement {k} is not an object", source_name=where)
        for key in ("name", "domain", "schedule"):
            if not isinstance(entry.get(key), str):
                raise ExchangeError(f"statement {k} has no string '{key}'", source_name=where)
        if entry["name"] in found:
            raise ExchangeError(f"statement {entry['name']} appears twice", source_name=where)
        found[entry["name"]] = entry
    _check_names([s.name for s in scop.statements], list(found), scop, where)
    return found


def _check_names(ours: list[str], theirs: list[str], scop: Scop, where: str) -> None:
    missing = [n for n in ours if n not in theirs]
    extra = [n for n in theirs if n not in ours]
    if missing or extra:
        raise ExchangeError(f"the statements are not those of {scop.name} ({', '.join(ours)}): "
                            f"missing {', '.join(missing) or 'none'}; not in the Scop {', '.join(extra) or 'none'}",
                            source_name=where)


def _jscop_accesses(accesses, what: str, where: str) -> tuple[isl.UnionMap, isl.UnionMap]:
    """(reads, writes) of a JSCoP statement's ``accesses``."""
    if not isinstance(accesses, list):
        raise ExchangeError(f"'accesses' of {what} is not a list", source_name=where)
    reads, writes = [], []
    for k, access in enumerate(accesses):
        kind = access.get("kind") if isinstance(access, dict) else None
        if kind not in ("read", "write") or not isinstance(access.get("relation"), str):
            raise ExchangeError(f"access {k} of {what} needs 'kind' (read or write) and 'relation'",
                                source_name=where)
        relation = _parse(isl.Map, access["relation"], f"access {k} of {what}", where)
        (writes if kind == "write" else reads).append(relation)
    return _union(reads), _union(writes)


def _check_jscop_arrays(scop: Scop, arrays, where: str) -> None:
    """The file's arrays are the Scop's: same names, extents and element types."""
    if not isinstance(arrays, list) or not all(isinstance(a, dict) for a in arrays):
        raise ExchangeError("'arrays' is not a list of objects", source_name=where)
    theirs = {a.get("name"): a for a in arrays}
    _check_array_names(scop, list(theirs), where)
    for array in scop.arrays.values():
        entry = theirs[array.name]
        sizes = [re.sub(r"\s+", "", str(s)) for s in entry.get("sizes", [])]
        if sizes != [re.sub(r"\s+", "", s) for s in array.shape] or entry.get("type") != LLVM_TYPES[array.dtype.name]:
            raise ExchangeError(f"array {array.name} is {entry.get('type')}{entry.get('sizes')} in the file but "
                                f"{LLVM_TYPES[array.dtype.name]}{list(array.shape)} in {scop.name}; polyopt imports "
                                "schedules only", source_name=where)


def _check_array_names(scop: Scop, names: list, where: str) -> None:
    missing = [n for n in scop.arrays if n not in names]
    extra = [str(n) for n in names if n not in scop.arrays]
    if missing or extra:
        raise ExchangeError(f"the arrays are not those of {scop.name}: missing {', '.join(missing) or 'none'}; "
                            f"not in the Scop {', '.join(extra) or 'none'}", source_name=where)


# ----- checks and the imported Schedule ----------------------------------------------------------

def _parse(kind, text: str, what: str, where: str, line: int | None = None):
    try:
        return kind(text)
    except isl.Error as exc:
        raise ExchangeError(f"cannot read {what} {text!r}: {exc}", source_name=where, line=line) from None


def _union(maps: list[isl.Map]) -> isl.UnionMap:
    result = isl.UnionMap("{ }")
    for m in maps:
        result = result.union(isl.UnionMap.from_map(m))
    return result


def _check_context(scop: Scop, context: isl.Set, where: str) -> None:
    """The file's context allows every parameter value the Scop's does (Clan writes none,
    ``{ : }``); one that excludes some would ask for a schedule of a narrower Scop."""
    if not context.is_params() or not scop.context.is_subset(context):
        raise ExchangeError(f"the context {context} excludes parameter values {scop.name}'s context "
                            f"{scop.context} allows; polyopt imports schedules only", source_name=where)


def _check_domain(scop: Scop, stmt: Statement, domain: isl.Set, where: str) -> None:
    """The file's domain of ``stmt`` is the Scop's (both within the context)."""
    ours = _domain(scop, stmt)
    if domain.get_tuple_name() != stmt.name or domain.dim(_D.set) != len(stmt.iterators):
        raise ExchangeError(f"statement {stmt.name}: the domain {domain} is not a set of {stmt.name} "
                            f"instances with {len(stmt.iterators)} dimensions", source_name=where)
    theirs = domain.intersect_params(scop.context)
    if not theirs.is_equal(ours):
        raise ExchangeError(f"statement {stmt.name}: the file's domain differs from the Scop's {stmt.domain}: "
                            f"only in the file {coalesced(theirs.subtract(ours))}, only in the Scop "
                            f"{coalesced(ours.subtract(theirs))}", source_name=where)


def _check_accesses(scop: Scop, stmt: Statement, accesses: tuple[isl.UnionMap, isl.UnionMap],
                    where: str) -> None:
    """The file's reads and writes of ``stmt`` (on its domain) are the Scop's; reads of 0-d
    arrays named like a scalar argument or size of the Scop are its arguments (Clan and Polly
    model scalars as 0-d arrays, polyopt as arguments) and are left out."""
    domain = isl.UnionSet.from_set(_domain(scop, stmt))
    scalars = {a.name for a in scop.arguments if a.kind != "array"} - set(scop.arrays)
    for kind, theirs, refs in (("reads", accesses[0], stmt.reads), ("writes", accesses[1], stmt.writes)):
        ours = _union([ref.relation for ref in refs]).intersect_domain(domain)
        theirs = _union([m for m in maps_of(theirs.intersect_domain(domain))
                         if not (kind == "reads" and m.dim(_D.out) == 0 and m.get_tuple_name(_D.out) in scalars)])
        if not theirs.is_equal(ours):
            raise ExchangeError(f"statement {stmt.name}: the file's {kind} {theirs} are not the Scop's {ours}; "
                                "polyopt imports schedules only", source_name=where)


def _statement_map(scop: Scop, stmt: Statement, schedule: isl.Map, where: str) -> isl.Map:
    """``schedule`` as a map from ``stmt``'s instances to anonymous time vectors."""
    if schedule.get_tuple_name(_D.in_) != stmt.name or schedule.dim(_D.in_) != len(stmt.iterators):
        raise ExchangeError(f"statement {stmt.name}: the schedule {schedule} does not map {stmt.name} "
                            f"instances ({len(stmt.iterators)} dimensions)", source_name=where)
    return schedule.reset_tuple_id(_D.out).intersect_domain(_domain(scop, stmt))


def _imported_schedule(scop: Scop, maps: dict[str, isl.Map], algorithm: str, trace: str,
                       parallel: bool, where: str) -> Schedule:
    """One band over the statements' maps (padded with trailing zeros to one length), verified;
    with ``parallel``, the outermost loop proven parallel is marked and the mark checked."""
    depth = max(m.dim(_D.out) for m in maps.values())
    flat = isl.UnionMap.empty(scop.context.get_space())
    for name, m in maps.items():
        n = m.dim(_D.out)
        padded = m.add_dims(_D.out, depth - n)
        for k in range(n, depth):
            padded = padded.fix_val(_D.out, k, isl.Val("0"))
        if not padded.is_single_valued():
            raise ExchangeError(f"statement {name}: the schedule {m} gives some instance more than one time",
                                source_name=where)
        flat = flat.union(isl.UnionMap.from_map(padded))
    tree = isl.Schedule.from_domain(scop.domain).insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(flat))
    deps = dependences(scop)
    verify(scop, tree, deps)
    if not parallel:
        return Schedule.from_tree(scop, tree, algorithm=algorithm, options={"parallel": False}, note=trace)
    imported = Schedule.from_tree(scop, _loops_only(mark_coincident(tree, scop, deps)), algorithm=algorithm,
                                  options={"parallel": True}, note=trace)
    marked = mark_parallel(imported)
    check_parallel(scop, marked.tree, deps)
    return marked


def _loops_only(tree: isl.Schedule) -> isl.Schedule:
    """The imported band with its coincident flags cleared on members that are constant for
    each statement (a statement's position in a sequence, no loop to run in parallel)."""
    band = tree.get_root().child(0)
    partial = band.band_get_partial_schedule()
    for k in range(band.band_n_member()):
        pieces: list[isl.Aff] = []
        partial.get_at(k).foreach_pw_aff(lambda pw: pw.foreach_piece(lambda _, aff: pieces.append(aff)))
        if not any(aff.involves_dims(_D.in_, 0, aff.dim(_D.in_)) for aff in pieces):
            band = band.band_member_set_coincident(k, 0)
    return band.get_schedule()


# ----- OpenSCoP: writing -----------------------------------------------------------------------

def _matrix_rows(basic: isl.BasicMap) -> list[list[int]]:
    """OpenSCoP rows of one basic map: e/i, output, input, local, parameter and constant
    columns; equalities first, each with its first output coefficient negative (``-c + f = 0``,
    the ``[eq -I A c]`` form Pluto reads)."""
    rows = []
    for flag, matrix in ((0, basic.equalities_matrix(*_COLUMNS)), (1, basic.inequalities_matrix(*_COLUMNS))):
        for r in range(matrix.rows()):
            row = [matrix.get_element_val(r, c).to_python() for c in range(matrix.cols())]
            lead = next((v for v in row[:basic.dim(_D.out)] if v), 0)
            rows.append([flag] + ([-v for v in row] if flag == 0 and lead > 0 else row))
    rows.sort(key=lambda row: (row[0], [not v for v in row[1:]]))   # equalities by leading column
    return rows


def _relation(kind: str, relation: isl.Map, names: list[str]) -> list[str]:
    """A relation (a union of basic maps) in OpenSCoP text; ``names`` label the columns."""
    parts = [b for b in relation.get_basic_maps() if not b.is_empty()] or [isl.BasicMap.empty(relation.get_space())]
    lines = [kind] + ([f"{len(parts)} # union of {len(parts)} parts"] if len(parts) > 1 else [])
    for basic in parts:
        rows = _matrix_rows(basic)
        n_out, n_in, n_div = basic.dim(_D.out), basic.dim(_D.in_), basic.dim(_D.div)
        n_param = basic.dim(_D.param)
        lines.append(f"{len(rows)} {n_out + n_in + n_div + n_param + 2} {n_out} {n_in} {n_div} {n_param}")
        columns = names[:n_out + n_in] + [f"l{k + 1}" for k in range(n_div)] + names[n_out + n_in:]
        lines.append("# e/i| " + " ".join(f"{c:>4}" for c in columns) + " |    1")
        lines += ["  " + " ".join(f"{v:>4}" for v in row) for row in rows]
    return lines + [""]


def _as_map(relation: isl.Set | isl.Map) -> isl.Map:
    """A set as a map with no input dimensions (OpenSCoP's domains and context)."""
    if isinstance(relation, isl.Map):
        return relation
    return isl.Map.from_range(relation.from_params() if relation.is_params() else relation)


def _array_ids(scop: Scop) -> dict[str, int]:
    return {name: k + 1 for k, name in enumerate(scop.arrays)}


def _access(ref, array_id: int, domain: isl.Set) -> isl.Map:
    """``S[i] -> A[f(i)]`` as OpenSCoP's ``S[i] -> [Arr, f(i)]`` with ``Arr`` the array's id."""
    relation = coalesced(ref.relation.gist_domain(domain)).insert_dims(_D.out, 0, 1)
    return relation.fix_val(_D.out, 0, isl.Val(str(array_id)))


def to_openscop(source: Exportable) -> str:
    """The OpenSCoP text of a Scop with its schedule (``source`` as for :func:`to_jscop`):
    context, parameter names, per statement its DOMAIN, SCATTERING, WRITE and READ relations and
    a ``<body>`` (iterators, the assignment in polyopt's syntax), and the ``<arrays>``
    extension naming the array ids of the access relations."""
    with ISL_LOCK:
        scop, tree = _scop_and_tree(source)
        schedules = _statement_schedules(scop, tree)
        params = list(scop.params)
        ids = _array_ids(scop)
        out = ["<OpenScop>", "", "# =============================================== Global",
               "# Language", "C", "", "# Context"]
        out += _relation("CONTEXT", _as_map(scop.context), params)
        out += ["# Parameters are provided", "1", "<strings>", " ".join(params), "</strings>", ""] if params \
            else ["# Parameters are not provided", "0", ""]
        out += ["# Number of statements", str(len(scop.statements)), ""]
        for k, stmt in enumerate(scop.statements, 1):
            domain = _domain(scop, stmt)
            iters = list(stmt.iterators)
            times = [f"c{d + 1}" for d in range(schedules[stmt.name].dim(_D.out))]
            out += [f"# =============================================== Statement {k} ({stmt.name})",
                    "# Number of relations describing the statement", str(2 + len(stmt.accesses)), ""]
            out += _relation("DOMAIN", _as_map(stmt.domain), iters + params)
            out += _relation("SCATTERING", schedules[stmt.name], times + iters + params)
            for ref in stmt.writes + stmt.reads:
                dims = ["Arr"] + [f"[{d + 1}]" for d in range(ref.relation.dim(_D.out))]
                out += _relation("WRITE" if ref.is_write else "READ", _access(ref, ids[ref.array], domain),
                                 dims + iters + params)
            out += ["# Number of Statement Extensions", "1", "<body>", "# Number of original iterators",
                    str(len(iters)), "# List of original iterators", " ".join(iters),
                    "# Statement body expression", f"{to_source(stmt.target)} = {to_source(stmt.value)};",
                    "</body>", ""]
        out += ["# =============================================== Extensions", "<arrays>",
                "# Number of arrays", str(len(ids))]
        out += [f"{number} {name}" for name, number in ids.items()]
        return "\n".join(out + ["</arrays>", "", "</OpenScop>", ""])


def write_openscop(source: Exportable, path: PathLike) -> None:
    """Write :func:`to_openscop` of ``source`` to ``path`` (a ``.scop`` file)."""
    Path(path).write_text(to_openscop(source))


# ----- OpenSCoP: reading -----------------------------------------------------------------------

class _Lines:
    """The meaningful lines of an OpenSCoP text (comments after ``#`` and blank lines dropped),
    with their line numbers for errors."""

    def __init__(self, text: str, where: str):
        self.where = where
        self.items = [(n, line.split("#", 1)[0].strip()) for n, line in enumerate(text.splitlines(), 1)]
        self.items = [(n, line) for n, line in self.items if line]
        self.pos = 0

    def error(self, message: str) -> ExchangeError:
        line = self.items[min(self.pos, len(self.items) - 1)][0] if self.items else None
        return ExchangeError(message, source_name=self.where, line=line)

    def next(self, what: str) -> str:
        if self.pos >= len(self.items):
            raise self.error(f"the file ends where {what} was expected")
        self.pos += 1
        return self.items[self.pos - 1][1]

    def peek(self) -> str | None:
        return self.items[self.pos][1] if self.pos < len(self.items) else None

    def ints(self, what: str) -> list[int]:
        text = self.next(what)
        try:
            return [int(v) for v in text.split()]
        except ValueError:
            self.pos -= 1
            raise self.error(f"expected {what} (integers), found {text!r}") from None

    def int(self, what: str) -> int:
        values = self.ints(what)
        if len(values) != 1:
            self.pos -= 1
            raise self.error(f"expected {what} (one integer)")
        return values[0]

    def generic(self) -> tuple[str, list[str]]:
        """A ``<uri> ... </uri>`` block: its URI and the lines inside."""
        start = self.next("an extension")
        match = re.fullmatch(r"<([\w-]+)>", start)
        if not match:
            self.pos -= 1
            raise self.error(f"expected an extension <tag>, found {start!r}")
        body = []
        while (line := self.next(f"</{match.group(1)}>")) != f"</{match.group(1)}>":
            body.append(line)
        return match.group(1), body


#: OpenSCoP relation types polyopt reads.
_TYPES = ("CONTEXT", "DOMAIN", "SCATTERING", "READ", "WRITE", "MAY_WRITE")


def _read_relation(lines: _Lines) -> tuple[str, list[tuple[list[int], list[list[int]]]]]:
    """A relation: its type and its union parts, each (header of six numbers, rows)."""
    kind = lines.next("a relation type")
    if kind not in _TYPES:
        lines.pos -= 1
        raise lines.error(f"expected a relation type ({', '.join(_TYPES)}), found {kind!r}")
    header = lines.ints(f"the {kind} relation's sizes")
    count = 1
    if len(header) == 1:
        count, header = header[0], lines.ints(f"the {kind} relation's sizes")
    parts = []
    for part in range(count):
        if part:
            header = lines.ints(f"the sizes of part {part + 1} of a {kind} union")
        if len(header) != 6 or header[1] != sum(header[2:]) + 2:
            lines.pos -= 1
            raise lines.error(f"{kind}: the sizes line must be 'rows columns outputs inputs locals "
                              f"parameters' with columns = outputs + inputs + locals + parameters + 2")
        rows = []
        for _ in range(header[0]):
            row = lines.ints(f"a row of the {kind} relation")
            if len(row) != header[1] or row[0] not in (0, 1):
                lines.pos -= 1
                raise lines.error(f"{kind}: a row must have {header[1]} integers, the first 0 (=) or 1 (>=)")
            rows.append(row)
        parts.append((header, rows))
    return kind, parts


def _matrix(rows: list[list[int]], columns: int) -> isl.Mat:
    matrix = isl.Mat.alloc(isl.DEFAULT_CONTEXT, len(rows), columns)
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            matrix = matrix.set_element_val(r, c, isl.Val(str(value)))
    return matrix


def _to_isl(parts, space: isl.Space, what: str, lines: _Lines) -> isl.Map:
    """The union of a relation's parts as an isl map in ``space`` (local columns become
    existentially quantified variables)."""
    result = isl.Map.empty(space)
    for header, rows in parts:
        _, columns, n_out, n_in, _, n_param = header
        if (n_out, n_in, n_param) != (space.dim(_D.out), space.dim(_D.in_), space.dim(_D.param)):
            raise lines.error(f"{what}: {n_out} output, {n_in} input dimensions and {n_param} parameters, "
                              f"expected {space.dim(_D.out)}, {space.dim(_D.in_)} and {space.dim(_D.param)}")
        equalities = [row[1:] for row in rows if row[0] == 0]
        inequalities = [row[1:] for row in rows if row[0] == 1]
        basic = isl.BasicMap.from_constraint_matrices(space, _matrix(equalities, columns - 1),
                                                      _matrix(inequalities, columns - 1), *_COLUMNS)
        result = result.union(isl.Map.from_basic_map(basic))
    return coalesced(result)


def _space(params: list[str], inputs: list[str], outputs: list[str] | int, name: str | None) -> isl.Space:
    """A map space: parameters, input dimensions (of statement ``name``), output dimensions
    named ``outputs`` (or that many unnamed ones)."""
    names = outputs if isinstance(outputs, list) else [None] * outputs
    space = isl.Space.alloc(isl.DEFAULT_CONTEXT, len(params), len(inputs), len(names))
    for kind, dims in ((_D.param, params), (_D.in_, inputs), (_D.out, names)):
        for k, dim in enumerate(dims):
            if dim is not None:
                space = space.set_dim_name(kind, k, dim)
    return space.set_tuple_name(_D.in_, name) if name else space


def schedule_from_openscop(scop: Scop | Kernel, openscop: PathLike, *, parallel: bool = True) -> Schedule:
    """The SCATTERING relations of an OpenSCoP file (a path, or the text itself: a string with
    ``<OpenScop>`` in it) as a verified :class:`~polyopt.Schedule` of ``scop``.

    Statements are matched by position; the parameters (by name where the file names them),
    context and domains must be the Scop's, and so must the accesses where the ``<arrays>``
    extension names the arrays, else :class:`~polyopt.errors.ExchangeError` (with the line);
    an illegal schedule raises :class:`~polyopt.IllegalScheduleError` with the witness.
    """
    scop = scop_of(scop)
    is_text = isinstance(openscop, str) and "<OpenScop>" in openscop
    where = "<openscop>" if is_text else str(openscop)
    lines = _Lines(openscop if is_text else Path(openscop).read_text(), where)
    with ISL_LOCK:
        if lines.next("<OpenScop>") != "<OpenScop>":
            lines.pos -= 1
            raise lines.error("an OpenSCoP file starts with <OpenScop>")
        lines.next("the language")
        params = _read_parameters(scop, lines)
        count = lines.int("the number of statements")
        if count != len(scop.statements):
            raise lines.error(f"{count} statements, but {scop.name} has {len(scop.statements)} "
                              f"({', '.join(s.name for s in scop.statements)})")
        read = [_read_statement(scop, stmt, params, lines) for stmt in scop.statements]
        arrays = _read_extensions(lines)
        maps = {}
        for stmt, (scattering, accesses) in zip(scop.statements, read):
            if arrays is not None:
                _check_accesses(scop, stmt, _named_accesses(accesses, arrays, stmt, lines), where)
            maps[stmt.name] = _statement_map(scop, stmt, scattering, where)
        trace = f"openscop({'<text>' if is_text else repr(where)})"
        return _imported_schedule(scop, maps, "openscop", trace, parallel, where)


def _read_parameters(scop: Scop, lines: _Lines) -> list[str]:
    """The context (checked against the Scop's) and the parameter names (the Scop's, in its
    order, when the file gives none)."""
    kind, parts = _read_relation(lines)
    if kind != "CONTEXT":
        raise lines.error(f"expected the CONTEXT relation, found {kind}")
    params = list(scop.params)
    if lines.int("whether parameter names are provided (0 or 1)") > 0:
        uri, body = lines.generic()
        names = " ".join(body).split()
        if uri != "strings" or sorted(names) != sorted(params):
            raise lines.error(f"the parameters {names} are not {scop.name}'s {params}")
        params = names
    context = _to_isl(parts, _space(params, [], 0, None), "CONTEXT", lines).params()
    _check_context(scop, context, lines.where)
    return params


def _read_statement(scop: Scop, stmt: Statement, params: list[str], lines: _Lines):
    """One statement: its domain checked against ``stmt``'s, its scattering and its accesses
    (kind, relation over ``[Arr, subscripts...]``), its extensions skipped."""
    count = lines.int(f"the number of relations of statement {stmt.name}")
    iters = list(stmt.iterators)
    scattering, accesses = None, []
    for _ in range(count):
        kind, parts = _read_relation(lines)
        n_out = parts[0][0][2]
        if kind == "DOMAIN":
            domain = _to_isl(parts, _space(params, [], iters, None), f"DOMAIN of {stmt.name}",
                             lines).range().set_tuple_name(stmt.name)
            _check_domain(scop, stmt, domain, lines.where)
        elif kind == "SCATTERING":
            scattering = _to_isl(parts, _space(params, iters, n_out, stmt.name), f"SCATTERING of {stmt.name}", lines)
        elif kind in ("READ", "WRITE", "MAY_WRITE"):
            relation = _to_isl(parts, _space(params, iters, n_out, stmt.name), f"{kind} of {stmt.name}", lines)
            accesses.append(("read" if kind == "READ" else "write", relation))
        else:
            raise lines.error(f"statement {stmt.name}: a {kind} relation")
    if scattering is None:
        raise lines.error(f"statement {stmt.name} has no SCATTERING relation")
    for _ in range(lines.int(f"the number of extensions of statement {stmt.name}")):
        lines.generic()
    return scattering, accesses


def _read_extensions(lines: _Lines) -> dict[int, str] | None:
    """The global extensions up to ``</OpenScop>``: the ``<arrays>`` names by id, if given."""
    arrays = None
    while lines.peek() != "</OpenScop>":
        uri, body = lines.generic()
        if uri == "arrays":
            entries = [line.split() for line in body[1:]]
            if not body or not all(len(e) == 2 and e[0].isdigit() for e in entries):
                raise lines.error("<arrays>: a count, then one 'id name' per line")
            arrays = {int(number): name for number, name in entries}
    lines.next("</OpenScop>")
    return arrays


def _named_accesses(accesses, arrays: dict[int, str], stmt: Statement, lines: _Lines):
    """(reads, writes) with OpenSCoP's ``[Arr, subscripts...]`` turned into ``A[subscripts...]``."""
    reads, writes = [], []
    for kind, relation in accesses:
        ids = relation.range().project_out(_D.set, 1, relation.dim(_D.out) - 1)
        if not ids.is_singleton() or ids.is_empty():
            raise lines.error(f"statement {stmt.name}: an access relation without one array id")
        number = ids.sample_point().get_coordinate_val(_D.set, 0).to_python()
        if number not in arrays:
            raise lines.error(f"statement {stmt.name}: array id {number} is not in <arrays>")
        named = relation.project_out(_D.out, 0, 1).set_tuple_name(_D.out, arrays[number])
        (reads if kind == "read" else writes).append(named)
    return _union(reads), _union(writes)
