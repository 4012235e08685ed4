"""C static control parts: every ``#pragma scop`` ... ``#pragma endscop`` region becomes a kernel.

::

    kernels = polyopt.from_c("gemm.c", defines={"N": 100})
    kernels[0](alpha=1.5, beta=1.2, C=C, A=A, B=B)       # by the C parameter names

The file is run through the system C preprocessor (``cpp``, else ``$CC``/``gcc``/``cc`` with
``-E``) against small stand-in headers for the C library (real system headers use GNU extensions
pycparser cannot read), then parsed with pycparser. Each region is translated into the same
expression trees and loop tree the Python DSL produces, with C's rules: integer ``/`` and ``%``
truncate, ``1.0`` is a double, ``sqrtf`` computes in float, assignments convert to the target type.

Names inside a region mean what they mean to pet (PPCG) and Pluto: integer function parameters
are size parameters (inferred from array shapes where an array extent names them, else passed
explicitly); floating-point function parameters are scalar arguments; array parameters
(``double A[N][M]``, ``double A[n][m]``), file-scope arrays and arrays declared in the function
(``double z[N];``) are array arguments; scalars declared in the function and only read in the
region (``double eps = 0.1;`` before the region) are read-only parameters of the region, sizes if
integer, scalar arguments if floating-point; scalars declared inside the region, or declared in
the function and assigned inside the region, are kernel-local temporaries (a value they hold
before the region is not carried in: the region must assign them before reading them). A
kernel's arguments are the ones its region uses: the C function's parameters in order, then
file-scope arrays, then the function's own arrays and read-only scalars. Integer sizes are
assumed non-negative, as they are in the Python DSL.

``polyopt cc`` puts each optimized region back where it was, so there every one of these names
still means the C variable (``optimize_c_file``).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import islpy as isl

from polyopt.analysis import expr as E
from polyopt.analysis.affine import NotAffine, extent_isl, isl_constraint, isl_text
from polyopt.errors import FrontendError, PolyoptWarning
from polyopt.frontends.common import assemble_scop, build_statement, domain_set
from polyopt.frontends.schedule_tree import Leaf, Loop
from polyopt.islutil import ISL_KEYWORDS, isl_safe_name
from polyopt.analysis.scop import Argument, Array, Scop
from polyopt.types import DType, boolean, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

try:
    from pycparser import c_ast, c_generator, c_parser
except ImportError:  # pragma: no cover - pycparser is a dependency; kept optional by design
    c_ast = c_generator = c_parser = None

# ----- preprocessing -----------------------------------------------------------------------------

_FAKE_DEFS = """\
#ifndef POLYOPT_FAKE_DEFS
#define POLYOPT_FAKE_DEFS
typedef unsigned long size_t; typedef long ssize_t; typedef long ptrdiff_t; typedef long off_t;
typedef long time_t; typedef long clock_t; typedef int wchar_t; typedef void *va_list;
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long uint64_t; typedef long intptr_t; typedef unsigned long uintptr_t;
typedef struct polyopt_FILE FILE;
struct timeval { long tv_sec; long tv_usec; };
#define NULL ((void *)0)
#endif
"""
_MATH_FUNCTIONS = ("sqrt", "exp", "log", "sin", "cos", "tan", "tanh", "floor", "ceil", "fabs")
_FAKE_HEADERS = {
    "math.h": "".join(f"double {f}(double); float {f}f(float);\n" for f in _MATH_FUNCTIONS)
    + "double pow(double, double); float powf(float, float); int abs(int);\n"
      "#define M_PI 3.14159265358979323846\n#define INFINITY (1.0f / 0.0f)\n#define NAN (0.0f / 0.0f)\n"
      "#define HUGE_VAL (1.0 / 0.0)\n",
    "stdio.h": "extern FILE *stdin, *stdout, *stderr;\nint printf(const char *, ...);\n"
               "int fprintf(FILE *, const char *, ...);\nint sprintf(char *, const char *, ...);\n"
               "int puts(const char *);\n#define EOF (-1)\n",
    "stdlib.h": "void *malloc(size_t); void *calloc(size_t, size_t); void free(void *);\n"
                "void exit(int); int atoi(const char *); double atof(const char *);\n"
                "#define EXIT_SUCCESS 0\n#define EXIT_FAILURE 1\n",
    "string.h": "void *memset(void *, int, size_t); void *memcpy(void *, const void *, size_t);\n"
                "size_t strlen(const char *); int strcmp(const char *, const char *);\n",
    "assert.h": "#define assert(x) ((void)0)\n",
    "limits.h": "#define INT_MAX 2147483647\n#define INT_MIN (-INT_MAX - 1)\n",
    "float.h": "#define DBL_MAX 1.79769313486231570815e+308\n#define FLT_MAX 3.40282346638528859812e+38F\n",
    "stdbool.h": "#define bool _Bool\n#define true 1\n#define false 0\n",
    "sys/time.h": "int gettimeofday(struct timeval *, void *);\n",
    "omp.h": "int omp_get_num_threads(void); int omp_get_thread_num(void); double omp_get_wtime(void);\n",
    **{name: "" for name in ("stdint.h", "stddef.h", "stdarg.h", "unistd.h", "time.h",
                             "sys/types.h", "inttypes.h")},
}
#: gcc and clang's half-precision type names, declared for pycparser (which knows only C99's
#: types; :func:`_base_type` reads them as f16). Their declarations are not symbols of the file.
_HALF_TYPE_NAMES = frozenset({"_Float16", "__fp16"})
_HALF_NAMES = "".join(f"typedef float {name};" for name in sorted(_HALF_TYPE_NAMES)) + "\n"
#: GNU spellings pycparser does not read, defined away (or to their C99 forms).
_GNU_DEFINES = ("__attribute__(x)=", "__extension__=", "__restrict=restrict", "__restrict__=restrict",
                "__inline=inline", "__inline__=inline", "__asm__(x)=", "__const=const",
                "__volatile__=volatile", "__signed__=signed", "__builtin_va_list=void *")


def _fake_libc() -> Path:
    """A directory of stand-in C library headers (written once per content)."""
    text = _FAKE_DEFS + "".join(f"{name}\n{body}" for name, body in _FAKE_HEADERS.items())
    folder = Path(tempfile.gettempdir()) / f"polyopt-fake-libc-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    if not (folder / "math.h").exists():
        for name, body in {"polyopt_fake_defs.h": _FAKE_DEFS, **_FAKE_HEADERS}.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f'#include "{"../" * name.count("/")}polyopt_fake_defs.h"\n{body}'
                            if name != "polyopt_fake_defs.h" else body)
    return folder


def _preprocessor() -> list[str]:
    for candidate in ("cpp", os.environ.get("CC"), "gcc", "cc", "clang"):
        if candidate and shutil.which(candidate):
            return [candidate] if candidate == "cpp" else [candidate, "-E"]
    raise FrontendError("no C preprocessor found: install cpp or gcc (or set $CC)", source_name="<c>")


def preprocess(path: str | None, text: str, *, defines: dict | None = None,
               include_dirs=()) -> str:
    """``text`` (the contents of ``path``, or source given directly) after the C preprocessor,
    with line markers kept so that positions refer to the original file. A ``defines`` entry that
    the file ``#define``s again is not used (the file's definition wins, as with gcc): a
    :class:`~polyopt.errors.PolyoptWarning` names the macro and the line."""
    command = _preprocessor() + ["-nostdinc"]
    command += [f"-I{d}" for d in include_dirs] + [f"-I{_fake_libc()}"]
    command += [f"-D{d}" for d in _GNU_DEFINES]
    command += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in (defines or {}).items()]
    result = subprocess.run(command + [path or "-"], input=None if path else text,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise FrontendError(f"the C preprocessor failed ({' '.join(command[:1])}): "
                            f"{result.stderr.strip()}", source_name=path or "<string>")
    for file, line, name in _redefinitions(result.stderr):
        if name in (defines or {}):
            value = defines[name]
            given = f"-D{name}" if value is None else f"-D{name}={value}"
            where = (path or "<string>") if file == "<stdin>" else file
            warnings.warn(f"{given} is not used: {where}, line {line} defines {name} again and that "
                          "definition wins (guard it with #ifndef to let -D choose)", PolyoptWarning,
                          stacklevel=3)  # the caller of from_c
    return result.stdout


#: cpp's (gcc's or clang's) warning that a file defines a macro that is already defined.
_REDEFINED = re.compile(r"^(.+?):(\d+)(?::\d+)?: warning: [\"'\u2018](\w+)[\"'\u2019] (?:macro )?redefined",
                        re.MULTILINE)


def _redefinitions(messages: str) -> list[tuple[str, int, str]]:
    """(file, line, macro) of every macro redefinition the preprocessor reported."""
    return [(file, int(line), name) for file, line, name in _REDEFINED.findall(messages)]


# ----- types ---------------------------------------------------------------------------------

def _base_type(names: list[str]) -> DType | None:
    """The element type of a C base type spelling (``['unsigned', 'long']``), None for void."""
    words = set(names) - {"signed", "unsigned", "const", "volatile", "restrict", "register", "static"}
    if words == {"double"}:
        return f64
    if words == {"float"}:
        return f32
    if len(words) == 1 and words <= _HALF_TYPE_NAMES:
        return f16
    if words == {"void"}:
        return None
    if not words <= {"char", "short", "int", "long", "_Bool"}:
        raise ValueError(" ".join(names))
    unsigned = "unsigned" in names  # x86-64: char is signed, short 16 bits, long 64
    for word, signed_type, unsigned_type in (("char", i8, u8), ("short", i16, u16), ("long", i64, u64)):
        if word in words:
            return unsigned_type if unsigned else signed_type
    return u32 if unsigned else i32


@dataclass(frozen=True)
class _Symbol:
    """A name declared outside the region: ``kind`` is "int" (size parameter), "data" (scalar
    argument), "array", "pointer", "outer" (a scalar local of the function that the region
    assigns) or "other" (a type a scop cannot use)."""

    name: str
    kind: str
    dtype: DType | None
    dims: tuple = ()
    node: object = None


@dataclass(frozen=True)
class Region:
    """Where a scop region is: its function and the lines of its two pragmas in ``file``."""

    function: str
    file: str
    first_line: int
    last_line: int


# ----- the kernel object ---------------------------------------------------------------------

class CKernel:
    """One scop region of a C file: call it like a DSL :class:`~polyopt.Kernel` (compiled once,
    run natively, arrays updated in place); ``.scop`` is its Scop, ``.region`` where it is."""

    float_dtype = None

    def __init__(self, scop: Scop, region: Region, inner_locals: dict[str, DType]):
        self.scop = scop
        self.name = scop.name
        self.region = region
        #: scalar temporaries declared inside the region (re-declared by ``polyopt cc``)
        self.inner_locals = inner_locals
        self.source = scop.source

    def __call__(self, *args, **kwargs):
        from polyopt.targets.cpu import compile as compile_kernel
        return compile_kernel(self)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<polyopt C kernel {self.name} ({self.region.file}:{self.region.first_line})>"


def from_c(source, function: str | None = None, *, defines: dict | None = None,
           include_dirs=()) -> list[CKernel]:
    """The kernels of every ``#pragma scop`` region in C ``source`` (a path, or C text).

    ``function`` keeps only the regions of that function; ``defines`` (name -> value or None) and
    ``include_dirs`` are passed to the preprocessor. Raises :class:`~polyopt.FrontendError` with
    the file, line and column of anything that is not a static control part.
    """
    if c_parser is None:
        raise FrontendError("the C frontend needs pycparser (pip install pycparser)", source_name="<c>")
    path, text = _read(source)
    name = path or "<string>"
    output = preprocess(path, text, defines=defines, include_dirs=include_dirs)
    if not path:
        output = output.replace('"<stdin>"', '"<string>"')
    tree = _parse(_HALF_NAMES + output, name)
    kernels = []
    globals_ = _file_symbols(tree)
    for func in (n for n in tree.ext if isinstance(n, c_ast.FuncDef)):
        if function is not None and func.decl.name != function:
            continue
        regions = list(_regions(func.body))
        for k, (first, last, body) in enumerate(regions):
            kernel_name = func.decl.name if len(regions) == 1 else f"{func.decl.name}_scop{k}"
            kernels.append(_Translator(func, globals_, kernel_name).kernel(first, last, body))
    if function is not None and not kernels:
        raise FrontendError(f"no '#pragma scop' region in a function named '{function}'", source_name=name)
    return kernels


def _read(source) -> tuple[str | None, str]:
    """(path or None, text): a Path or a one-line string is a file name, anything else C text."""
    if isinstance(source, Path) or "\n" not in source:
        if not Path(source).is_file():
            raise FrontendError(f"no such file: {source}", source_name=str(source))
        return str(source), Path(source).read_text()
    return None, source


def _parse(text: str, name: str):
    """The pycparser AST of preprocessed ``text``; a syntax error is a FrontendError where the
    code went wrong: pycparser names the first token it cannot use, and when that token starts
    a line, what is missing (a ';' most often) belongs at the end of the code before it."""
    try:
        return c_parser.CParser().parse(text, name)
    except c_parser.ParseError as exc:  # "file:line:column: message", or "file: message"
        located = re.match(r"(.*?):(\d+):(\d+): (.*)", str(exc), re.DOTALL)
        if located:
            file, line, column, message = located.groups()
            line, column = int(line), int(column)
            if message.startswith("before: "):
                token = message.removeprefix("before: ")
                token = "#pragma" if token == "pragma" else token  # the token after the '#'
                message = f"unexpected '{token}'"
                end = _end_of_code_before(text, file, line, column)
                if end is not None:
                    message = f"'{token}' (line {line}) cannot follow the end of this line"
                    file, line, column = end
            raise FrontendError(f"C syntax error: {message}", source_name=file, line=line,
                                column=column) from None
        message = str(exc).removeprefix(f"{name}: ")
        raise FrontendError(f"C syntax error: {message}", source_name=name) from None
    except Exception as exc:  # pycparser raises plain exceptions on some malformed input
        raise FrontendError(f"pycparser cannot read this C code: {exc}", source_name=name) from None


_LINE_MARKER = re.compile(r'\s*#\s*(?:line\s+)?(\d+)\s+"([^"]*)"')


def _end_of_code_before(text: str, file: str, line: int, column: int) -> tuple[str, int, int] | None:
    """(file, line, column just after) the last code before position ``line``:``column`` of
    ``file`` in preprocessed ``text``, when that code ends on an earlier line; None when code
    precedes the position on its own line (or the position is not found). The preprocessor's
    line markers map ``text`` back to the files."""
    where: tuple[str, int] | None = None
    code: list[tuple[str, int, str]] = []  # (file, line, text) of each line of code
    for raw in text.splitlines():
        marker = _LINE_MARKER.match(raw)
        if marker:
            where = (marker.group(2), int(marker.group(1)))
            continue
        if where is None:
            where = (file, 1)
        if where == (file, line):
            if raw[:column - 1].strip() not in ("", "#"):  # '#' of a '#pragma' token
                return None
            previous = next(((f, n, t) for f, n, t in reversed(code) if t.strip()), None)
            if previous is None:
                return None
            f, n, t = previous
            return f, n, len(t.rstrip()) + 1
        code.append((*where, raw))
        where = (where[0], where[1] + 1)
    return None


def _pragma(node, word: str) -> bool:
    return isinstance(node, c_ast.Pragma) and node.string.split() == [word]


def _regions(compound):
    """(scop pragma, endscop pragma, statements between) of every region in ``compound``."""
    items = (compound.block_items or []) if isinstance(compound, c_ast.Compound) else []
    k = 0
    while k < len(items):
        item = items[k]
        if _pragma(item, "scop"):
            end = next((j for j in range(k + 1, len(items)) if _pragma(items[j], "endscop")), None)
            if end is None:
                raise _error(item, "'#pragma scop' without a matching '#pragma endscop' in the same block")
            yield item, items[end], items[k + 1:end]
            k = end + 1
            continue
        if _pragma(item, "endscop"):
            raise _error(item, "'#pragma endscop' without a '#pragma scop' before it")
        for child in [item] if isinstance(item, c_ast.Compound) else _nested_compounds(item):
            yield from _regions(child)
        k += 1


def _nested_compounds(node):
    """The blocks directly under a loop or conditional ``node`` (through nested ones)."""
    if not isinstance(node, (c_ast.For, c_ast.If, c_ast.While, c_ast.DoWhile)):
        return
    for _, child in node.children():
        if isinstance(child, c_ast.Compound):
            yield child
        else:
            yield from _nested_compounds(child)


def _error(node, message: str) -> FrontendError:
    coord = getattr(node, "coord", None)
    construct = None
    if node is not None and not isinstance(node, (c_ast.For, c_ast.If, c_ast.Compound, c_ast.Pragma)):
        construct = c_generator.CGenerator().visit(node).strip().splitlines()[0]
    return FrontendError(message, source_name=getattr(coord, "file", None) or "<c>",
                         line=getattr(coord, "line", None), column=getattr(coord, "column", None),
                         construct=construct or None)


def _file_symbols(tree) -> dict[str, c_ast.Node]:
    """File-scope declarations by name (typedefs included: they name types)."""
    return {n.name: n for n in tree.ext if isinstance(n, (c_ast.Decl, c_ast.Typedef)) and n.name}


# ----- translation of one region -------------------------------------------------------------

_STEP_OPS = {"p++": 1, "++": 1, "p--": -1, "--": -1}
_REFUSED_STATEMENTS = {
    "While": "while loops", "DoWhile": "do-while loops", "Break": "break statements",
    "Continue": "continue statements", "Goto": "goto statements", "Return": "return statements",
    "Label": "labels", "Switch": "switch statements", "FuncCall": "function calls as statements "
    "(they may have side effects)", "Typedef": "typedefs",
}
_C_MATH = {**{f: (f, f64) for f in ("sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "pow")},
           **{f + "f": (f, f32) for f in ("sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "pow")},
           "fabs": ("abs", f64), "fabsf": ("abs", f32)}
_INTEGER_HELPERS = ("floord", "ceild", "min", "max")


class _Translator:
    """Translates one region of ``func`` into statements, domains and the loop tree."""

    def __init__(self, func, file_symbols: dict, name: str):
        self.func = func
        self.name = name
        self.typedefs = {k: v for k, v in file_symbols.items() if isinstance(v, c_ast.Typedef)}
        self.symbols: dict[str, _Symbol] = {}
        for decl in file_symbols.values():
            if isinstance(decl, c_ast.Decl) and not isinstance(decl.type, c_ast.FuncDecl):
                symbol = self._symbol(decl, "file")
                if symbol.kind == "array":
                    self.symbols[decl.name] = symbol
        params = func.decl.type.args.params if func.decl.type.args else []
        self.c_params = [p for p in params if isinstance(p, c_ast.Decl) and p.name]
        for decl in self.c_params:
            self.symbols[decl.name] = self._symbol(decl, "param")
        #: the loop iterators in scope as spelled in isl text (and the Scop), and the C spelling of
        #: each: they differ where isl reserves the C name (``for (mod = 0; ...)`` iterates ``mod_``)
        self.iterators: list[str] = []
        self.spellings: dict[str, str] = {}
        #: every name the function mentions: a renamed iterator takes none of them
        self.names = {n.name for n in _walk(func) if isinstance(n, (c_ast.ID, c_ast.Decl)) and n.name}
        self.locals: dict[str, DType] = {}
        self.inner_locals: dict[str, DType] = {}
        self.assigned: set[str] = set()
        self.statements: list = []
        self.origin: dict[int, tuple] = {}

    # ----- declarations ------------------------------------------------------------------------
    def _type(self, node) -> DType | None:
        """Element type of a TypeDecl/IdentifierType, resolving typedefs."""
        if isinstance(node, c_ast.TypeDecl):
            node = node.type
        if isinstance(node, c_ast.IdentifierType):
            if len(node.names) == 1 and node.names[0] in self.typedefs and node.names[0] not in _HALF_TYPE_NAMES:
                return self._type(self.typedefs[node.names[0]].type)
            try:
                return _base_type(node.names)
            except ValueError:
                raise _error(node, f"unsupported C type '{' '.join(node.names)}'") from None
        raise _error(node, "only arithmetic types are supported here")

    def _symbol(self, decl, where: str) -> _Symbol:
        node, dims = decl.type, []
        while isinstance(node, c_ast.ArrayDecl):
            dims.append(node.dim)
            node = node.type
        if isinstance(node, c_ast.PtrDecl):
            return _Symbol(decl.name, "pointer", None, node=decl)
        try:
            dtype = self._type(node)
        except FrontendError:  # structures, unions, long double...: refused only where used
            return _Symbol(decl.name, "other", None, node=decl)
        if dims:
            return _Symbol(decl.name, "array", dtype, tuple(dims), decl)
        if where == "param":
            return _Symbol(decl.name, "data" if dtype and dtype.is_float else "int", dtype, node=decl)
        return _Symbol(decl.name, "outer", dtype, node=decl)

    def _function_locals(self, region_items) -> None:
        """Scalars and arrays declared in the function outside the region. A scalar the region
        assigns is a temporary of the region ("outer"); one it only reads holds a value set
        before the region, a read-only parameter of it ("int" size or "data" scalar), as in pet."""
        inside = {id(n) for item in region_items for n in _walk(item)}
        assigned = _assigned_names(region_items)
        for node in _walk(self.func.body):
            if isinstance(node, c_ast.Decl) and id(node) not in inside and node.name \
                    and not isinstance(node.type, c_ast.FuncDecl):
                symbol = self._symbol(node, "local")
                if symbol.kind == "outer" and symbol.dtype is not None and node.name not in assigned:
                    kind = "data" if symbol.dtype.is_float else "int"
                    symbol = _Symbol(node.name, kind, symbol.dtype, node=node)
                self.symbols.setdefault(node.name, symbol)

    # ----- the region --------------------------------------------------------------------------
    def kernel(self, first, last, items) -> CKernel:
        self._function_locals(items)
        used = {n.name for item in items for n in _walk(item) if isinstance(n, c_ast.ID)}
        arrays = {n: self._array(self.symbols[n]) for n in used
                  if n in self.symbols and self.symbols[n].kind == "array"}
        params = {n for n in used if n in self.symbols and self.symbols[n].kind == "int"}
        for array in arrays.values():
            params |= _names_in(array.shape)
        self.params = tuple(sorted(params))
        reserved = sorted(set(self.params) & ISL_KEYWORDS)
        if reserved:
            raise _error(first, f"size parameter '{reserved[0]}' is a word isl reserves; give the "
                                "size another name")
        self.arrays = arrays
        nodes = self._block(items, [])
        if not self.statements:
            raise _error(first, "the scop region has no statements")
        scop = self._assemble(nodes, used, items)
        file = first.coord.file
        return CKernel(scop, Region(self.func.decl.name, file, first.coord.line, last.coord.line),
                       dict(self.inner_locals))

    def _assemble(self, nodes, used: set[str], items) -> Scop:
        inferable = {p for a in self.arrays.values() for p in _names_in(a.shape)}
        arguments = []
        for decl in self.c_params + [s.node for s in self.symbols.values() if s.node not in self.c_params]:
            symbol = self.symbols.get(decl.name)
            if decl.name not in used or symbol is None or symbol.node is not decl:
                continue
            if symbol.kind == "array":
                arguments.append(Argument(decl.name, "array", symbol.dtype))
            elif symbol.kind == "data":
                arguments.append(Argument(decl.name, "scalar", symbol.dtype))
            elif symbol.kind == "int" and decl.name not in inferable:
                arguments.append(Argument(decl.name, "param", i64))
        generator = c_generator.CGenerator()
        source = f"/* {self.name} */\n{generator.visit(self.func.decl)}\n" + "".join(
            generator.visit(item) + ";\n" for item in items)
        return assemble_scop(self.name, self.params, self.arrays, self.locals, self.statements,
                             nodes, arguments, source)

    def _array(self, symbol: _Symbol) -> Array:
        shape = []
        for dim in symbol.dims:
            if dim is None:
                raise _error(symbol.node, f"array '{symbol.name}' needs every extent "
                                          "(write double A[n][m], not A[][m])")
            extent = self._extent(dim, symbol.name)
            shape.append(extent)
        return Array(symbol.name, symbol.dtype, tuple(shape))

    def _extent(self, dim, array: str) -> str:
        """An array extent as affine text in Python syntax (parameters are non-negative, so C's
        truncating division is floor division there)."""
        int_params = [n for n, s in self.symbols.items() if s.kind == "int"]
        floor = {"tdiv": "//", "tmod": "%"}
        try:
            expr = E.substitute(self._int_expr(dim), lambda n: E.Binary(floor[n.op], n.lhs, n.rhs, n.dtype)
                                if isinstance(n, E.Binary) and n.op in floor else None)
            text = E.to_source(expr)
            extent_isl(text, int_params)
        except (NotAffine, ValueError):
            raise _error(dim, f"extent of array '{array}' is not an affine expression of integer "
                              "parameters") from None
        return text

    # ----- statements --------------------------------------------------------------------------
    def _block(self, items, conditions: list[str]) -> list:
        nodes: list = []
        for item in items:
            nodes.extend(self._statement(item, conditions))
        return nodes

    def _statement(self, node, conditions: list[str]) -> list:
        if isinstance(node, c_ast.For):
            return [self._for(node, conditions)]
        if isinstance(node, c_ast.If):
            cond = self._constraint(node.cond)
            then = self._block([node.iftrue], conditions + [cond])
            other = self._block([node.iffalse], conditions + [f"not ({cond})"]) if node.iffalse else []
            return then + other
        if isinstance(node, c_ast.Compound):
            return self._block(node.block_items or [], conditions)
        if isinstance(node, c_ast.Assignment):
            return self._assignments(node, conditions)
        if isinstance(node, c_ast.UnaryOp) and node.op in _STEP_OPS:
            target = self._target(node.expr)
            self._check_assigned(target, node.expr)
            value = E.binary("+", target, E.Const(_STEP_OPS[node.op], i32, weak=True))
            return [self._add_statement(target, E.cast(value, target.dtype), conditions, node)]
        if isinstance(node, c_ast.Decl):
            return self._declaration(node, conditions)
        if isinstance(node, (c_ast.EmptyStatement, c_ast.Pragma)):
            if _pragma(node, "scop") or _pragma(node, "endscop"):
                raise _error(node, "nested '#pragma scop' regions")
            return []
        what = _REFUSED_STATEMENTS.get(type(node).__name__, f"{type(node).__name__} statements")
        raise _error(node, f"{what} are not supported in a static control part")

    def _declaration(self, node, conditions) -> list:
        symbol = self._symbol(node, "local")
        if symbol.kind != "outer" or symbol.dtype is None:
            raise _error(node, f"only scalar temporaries can be declared in a scop ('{node.name}' "
                               "is an array or pointer)")
        self._check_new_name(node.name, node)
        if self.locals.get(node.name, symbol.dtype) != symbol.dtype:
            raise _error(node, f"'{node.name}' is declared twice with different types")
        self.locals[node.name] = self.inner_locals[node.name] = symbol.dtype
        if node.init is None:
            return []
        if isinstance(node.init, c_ast.InitList):
            raise _error(node.init, "initializer lists are not supported")
        target = E.Access(node.name, (), symbol.dtype)
        value = E.cast(self._expr(node.init), symbol.dtype)
        self.assigned.add(node.name)
        return [self._add_statement(target, value, conditions, node)]

    def _check_new_name(self, name: str, node) -> None:
        symbol = self.symbols.get(name)
        if name in self.spellings or (symbol is not None and symbol.kind != "outer"):
            raise _error(node, f"'{name}' shadows a loop variable, parameter or array")

    def _add_statement(self, target: E.Access, value: E.Expr, conditions, node) -> Leaf:
        name = f"S{len(self.statements)}"
        iters = tuple(self.iterators)
        try:
            domain = domain_set(name, iters, self.params, conditions)
        except isl.Error as exc:
            raise _error(node, f"isl cannot represent this statement's domain: {exc}") from None
        text = c_generator.CGenerator().visit(node).strip()
        self.statements.append(build_statement(name, iters, self.params, domain, target, value,
                                               node.coord.line, text))
        return Leaf(name, iters)

    def _for(self, node, conditions: list[str]) -> Loop:
        c_name, init = self._loop_init(node)
        step = self._loop_step(node.next, c_name)
        self._check_new_name(c_name, node)
        start = self._expr(init)
        if start.dtype.is_float:
            raise _error(init, "a loop must start at an integer value")
        var = isl_safe_name(c_name, self.names)
        self.iterators.append(var)
        self.spellings[c_name] = var
        try:
            it = E.Var(var, "iter")
            cons = [self._affine_constraint(E.binary(">=" if step > 0 else "<=", it, start), init)]
            if node.cond is None:
                raise _error(node, "a loop without a condition is unbounded")
            cond = self._bool(node.cond)
            cons.append(self._affine_constraint(cond, node.cond))
            self._check_bounded(cond, var, step, node.cond)
            if abs(step) != 1:
                stride = E.binary("%", E.binary("-", it, start), E.Const(abs(step), i64))
                cons.append(self._affine_constraint(E.binary("==", stride, E.Const(0, i64)), init))
            body = self._block([node.stmt], conditions + cons)
        finally:
            self.iterators.pop()
            del self.spellings[c_name]
        return Loop(var, step, body)

    def _loop_init(self, node):
        init = node.init
        if isinstance(init, c_ast.DeclList) and len(init.decls) == 1 and init.decls[0].init is not None:
            decl = init.decls[0]
            dtype = self._symbol(decl, "local").dtype
            if dtype is None or dtype.is_float:
                raise _error(decl, "a loop variable must be an integer")
            return decl.name, decl.init
        if isinstance(init, c_ast.Assignment) and init.op == "=" and isinstance(init.lvalue, c_ast.ID):
            symbol = self.symbols.get(init.lvalue.name)
            if symbol is not None and (symbol.kind != "outer" or symbol.dtype.is_float):
                raise _error(init.lvalue, f"'{init.lvalue.name}' cannot be a loop variable: it is "
                                          "not a local integer")
            return init.lvalue.name, init.rvalue
        raise _error(init or node, "a loop must start with 'i = start' or 'int i = start'")

    def _loop_step(self, next_, var: str) -> int:
        if isinstance(next_, c_ast.UnaryOp) and next_.op in _STEP_OPS and _is_id(next_.expr, var):
            return _STEP_OPS[next_.op]
        if isinstance(next_, c_ast.Assignment) and _is_id(next_.lvalue, var):
            value, sign = next_.rvalue, {"+=": 1, "-=": -1}.get(next_.op)
            if next_.op == "=" and isinstance(value, c_ast.BinaryOp) and value.op in "+-" \
                    and _is_id(value.left, var):
                value, sign = value.right, 1 if value.op == "+" else -1
            step = _int_literal(value)
            if sign is not None and step is not None and step != 0:
                return sign * step
        raise _error(next_, f"the loop increment must be {var}++, {var}--, {var} += c or {var} -= c "
                            "with an integer constant c")

    def _check_bounded(self, cond: E.Expr, var: str, step: int, node) -> None:
        """The condition must bound the iterator in the direction it moves."""
        wanted = ("<", "<=") if step > 0 else (">", ">=")
        mirrored = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
        for term in _conjuncts(cond):
            if isinstance(term, E.Binary):
                if term.lhs == E.Var(var, "iter") and term.op in wanted:
                    return
                if term.rhs == E.Var(var, "iter") and mirrored.get(term.op) in wanted:
                    return
        direction = "above" if step > 0 else "below"
        raise _error(node, f"the loop condition must bound '{var}' from {direction} "
                           f"({var} {wanted[0]} ... or {var} {wanted[1]} ...)")

    def _constraint(self, node) -> str:
        return self._affine_constraint(self._bool(node), node)

    def _affine_constraint(self, cond: E.Expr, node) -> str:
        try:
            return isl_constraint(cond)
        except NotAffine as exc:
            raise self._located(exc, node, "not affine") from None

    def _located(self, exc: NotAffine, node, prefix: str) -> FrontendError:
        """The error at the C node that produced the offending sub-expression."""
        origin = self.origin.get(id(exc.expr))
        at = origin[1] if origin is not None and origin[0] is exc.expr else node
        return _error(at, f"{prefix}: {exc.reason}")

    # ----- assignments -------------------------------------------------------------------------
    def _assignments(self, node, conditions) -> list:
        """The statements of ``a = b = value`` in C's order: ``b = value``, then ``a = b`` (an
        assignment's value is its target's new value, converted to the target's type)."""
        if not isinstance(node.rvalue, c_ast.Assignment):
            return [self._add_statement(*self._assignment(node), conditions, node)]
        first = self._assignments(node.rvalue, conditions)
        return first + self._assignments(c_ast.Assignment(node.op, node.lvalue, node.rvalue.lvalue,
                                                          node.coord), conditions)

    def _assignment(self, node) -> tuple[E.Access, E.Expr]:
        value = self._expr(node.rvalue)
        target = self._target(node.lvalue)
        if node.op != "=":
            self._check_assigned(target, node.lvalue)
            value = self._arith(node.op[:-1], target, value, node)
        self.assigned.add(target.array)
        return target, E.cast(value, target.dtype)

    def _target(self, node) -> E.Access:
        if isinstance(node, c_ast.ArrayRef):
            return self._access(node)
        if isinstance(node, c_ast.ID):
            name = node.name
            symbol = self.symbols.get(name)
            if name in self.locals:
                return E.Access(name, (), self.locals[name])
            if name in self.spellings:
                raise _error(node, f"cannot assign to loop variable '{name}' inside its loop")
            if symbol is not None and symbol.kind == "outer":
                self.locals[name] = symbol.dtype
                return E.Access(name, (), symbol.dtype)
            if symbol is not None and symbol.kind in ("int", "data"):
                raise _error(node, f"cannot assign to parameter '{name}' in a scop")
            if symbol is not None and symbol.kind in ("array", "pointer"):
                raise _error(node, f"cannot assign to '{name}' itself (assign to an element)")
            raise _error(node, f"unknown name '{name}'")
        raise _error(node, "the target of an assignment must be an array element or a scalar")

    def _check_assigned(self, target: E.Access, node) -> None:
        if not target.indices and target.array not in self.assigned:
            raise _error(node, f"scalar '{target.array}' is updated before it is assigned in the scop")

    # ----- expressions -------------------------------------------------------------------------
    def _expr(self, node) -> E.Expr:
        result = self._translate(node)
        self.origin[id(result)] = (result, node)
        return result

    def _translate(self, node) -> E.Expr:
        if isinstance(node, c_ast.Constant):
            return self._constant(node)
        if isinstance(node, c_ast.ID):
            return self._name(node)
        if isinstance(node, c_ast.ArrayRef):
            return self._access(node)
        if isinstance(node, c_ast.BinaryOp):
            return self._binary(node)
        if isinstance(node, c_ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, c_ast.TernaryOp):
            return E.select(self._bool(node.cond), self._expr(node.iftrue), self._expr(node.iffalse))
        if isinstance(node, c_ast.Cast):
            return self._cast(node)
        if isinstance(node, c_ast.FuncCall):
            return self._call(node)
        if isinstance(node, c_ast.Assignment):
            raise _error(node, "assignments inside expressions are not supported")
        if isinstance(node, c_ast.StructRef):
            raise _error(node, "structures are not supported in a scop")
        raise _error(node, f"{type(node).__name__} expressions are not supported in a scop")

    def _bool(self, node) -> E.Expr:
        return E.truth(self._expr(node))

    def _int_expr(self, node) -> E.Expr:
        value = self._expr(node)
        if value.dtype.is_float or value.dtype == boolean:
            raise _error(node, f"an integer expression is needed here, not a {value.dtype} value")
        return value

    def _constant(self, node) -> E.Expr:
        if "int" in node.type:
            return E.Const(_c_int(node.value), i64 if "long" in node.type else i32, weak=True)
        if node.type in ("double", "float"):
            body = node.value.rstrip("fFlL")  # a hex float ends with its exponent's digits
            value = float.fromhex(body) if body.lower().startswith("0x") else float(body)
            return E.Const(value, f32 if node.type == "float" else f64)
        raise _error(node, f"{node.type} literals are not supported in a scop")

    def _name(self, node) -> E.Expr:
        name = node.name
        if name in self.spellings:
            return E.Var(self.spellings[name], "iter")
        if name in self.locals:
            if name not in self.assigned:
                raise _error(node, f"scalar '{name}' is read before it is assigned in the scop")
            return E.Access(name, (), self.locals[name])
        symbol = self.symbols.get(name)
        kind = symbol.kind if symbol else None
        if kind == "int":
            return E.Var(name, "param")
        if kind == "data":
            return E.Var(name, "scalar", symbol.dtype)
        if kind == "outer":
            raise _error(node, f"'{name}' is read before the scop assigns it: a value set before the "
                               "scop is carried in only for scalars the scop does not assign")
        if kind == "array":
            raise _error(node, f"array '{name}' is used without all its subscripts "
                               "(pointer arithmetic is not supported)")
        if kind == "pointer":
            raise _error(node, f"'{name}' is a pointer: declare it as an array with extents, "
                               f"e.g. double {name}[n]")
        if kind == "other":
            raise _error(node, f"'{name}' has a type a scop cannot use (only int, long, float, "
                               "double and arrays of them)")
        raise _error(node, f"unknown name '{name}'")

    def _access(self, node) -> E.Access:
        indices, base = [], node
        while isinstance(base, c_ast.ArrayRef):
            indices.insert(0, base.subscript)
            base = base.name
        if not isinstance(base, c_ast.ID):
            raise _error(node, "only named arrays can be subscripted")
        symbol = self.symbols.get(base.name)
        if symbol is None or symbol.kind != "array":
            self._name(base)  # the precise refusal (pointer, unknown, ...)
            raise _error(base, f"'{base.name}' is not an array")
        array = self.arrays[base.name]
        if len(indices) != len(array.shape):
            raise _error(node, f"array '{array.name}' has {len(array.shape)} dimensions, "
                               f"subscripted with {len(indices)}")
        exprs = []
        for index in indices:
            value = self._int_expr(index)
            try:
                isl_text(value)
            except NotAffine as exc:
                raise self._located(exc, index, f"non-affine subscript of '{array.name}'") from None
            exprs.append(value)
        return E.Access(array.name, tuple(exprs), array.dtype)

    def _binary(self, node) -> E.Expr:
        if node.op in ("&&", "||"):
            op = "and" if node.op == "&&" else "or"
            return E.binary(op, self._bool(node.left), self._bool(node.right))
        lhs, rhs = self._expr(node.left), self._expr(node.right)
        return self._arith(node.op, lhs, rhs, node)

    @staticmethod
    def _arith(op: str, lhs: E.Expr, rhs: E.Expr, node) -> E.Expr:
        """``lhs op rhs`` with C's rules: integer division and remainder truncate."""
        if op in ("&", "|", "^", "<<", ">>"):
            raise _error(node, f"bitwise operator '{op}' is not supported in a scop")
        integers = not lhs.dtype.is_float and not rhs.dtype.is_float
        if op == "%" and not integers:
            raise _error(node, "'%' needs integer operands (use fmod outside the scop)")
        if op in ("/", "%") and integers:
            op = "tdiv" if op == "/" else "tmod"
        if op not in E.ARITHMETIC_OPS + E.COMPARISON_OPS:
            raise _error(node, f"operator '{op}' is not supported in a scop")
        return E.binary(op, lhs, rhs)

    def _unary(self, node) -> E.Expr:
        if node.op == "-":
            return E.negate(self._expr(node.expr))
        if node.op == "+":
            return self._expr(node.expr)
        if node.op == "!":
            return E.logical_not(self._expr(node.expr))
        reasons = {"&": "taking an address (pointer arithmetic) is not supported in a scop",
                   "*": "dereferencing a pointer (pointer arithmetic) is not supported in a scop",
                   "sizeof": "sizeof is not supported in a scop",
                   "~": "bitwise operator '~' is not supported in a scop"}
        if node.op in _STEP_OPS:
            raise _error(node, "increments inside expressions have side effects; write them as "
                               "statements")
        raise _error(node, reasons.get(node.op, f"unary operator '{node.op}' is not supported"))

    def _cast(self, node) -> E.Expr:
        to = node.to_type.type
        if not isinstance(to, c_ast.TypeDecl):
            raise _error(node, "casts to pointer types are not supported in a scop")
        dtype = self._type(to)
        if dtype is None:
            raise _error(node, "casts to void are not supported in a scop")
        return E.cast(self._expr(node.expr), dtype)

    def _call(self, node) -> E.Expr:
        if not isinstance(node.name, c_ast.ID):
            raise _error(node, "only named math functions can be called in a scop")
        name = node.name.name
        args = [self._expr(a) for a in (node.args.exprs if node.args else [])]
        if name in _INTEGER_HELPERS:
            return self._integer_helper(name, args, node)
        if name == "abs" and len(args) == 1 and not args[0].dtype.is_float:
            return E.call("abs", args)
        if name not in _C_MATH:
            allowed = ", ".join(sorted(set(_C_MATH) | {"abs", *_INTEGER_HELPERS}))
            raise _error(node, f"call to '{name}' is not allowed in a scop (it may have side effects);"
                               f" allowed: {allowed}")
        func, dtype = _C_MATH[name]
        if len(args) != E.MATH_FUNCTIONS[func]:
            raise _error(node, f"{name}() takes {E.MATH_FUNCTIONS[func]} argument(s), got {len(args)}")
        return E.call(func, [E.cast(a, dtype) for a in args])

    @staticmethod
    def _integer_helper(name: str, args, node) -> E.Expr:
        if len(args) != 2 or any(a.dtype.is_float or a.dtype == boolean for a in args):
            raise _error(node, f"{name}() takes two integer arguments")
        a, b = args
        if name == "floord":
            return E.binary("//", a, b)
        if name == "ceild":
            return E.negate(E.binary("//", E.negate(a), b))
        return E.binary(name, a, b)


# ----- small helpers -------------------------------------------------------------------------

def _walk(node):
    yield node
    for _, child in node.children():
        yield from _walk(child)


def _assigned_names(items) -> set[str]:
    """The names ``items`` assign or declare: scalar targets of assignments and increments."""
    names = set()
    for node in (n for item in items for n in _walk(item)):
        if isinstance(node, c_ast.Decl) and node.name:
            names.add(node.name)
        target = node.lvalue if isinstance(node, c_ast.Assignment) else \
            node.expr if isinstance(node, c_ast.UnaryOp) and node.op in _STEP_OPS else None
        if isinstance(target, c_ast.ID):
            names.add(target.name)
    return names


def _is_id(node, name: str) -> bool:
    return isinstance(node, c_ast.ID) and node.name == name


def _c_int(text: str) -> int:
    """The value of a C integer literal (decimal, octal 017, hex 0x1f; suffixes u/l ignored)."""
    text = text.rstrip("uUlL")
    if len(text) > 1 and text[0] == "0" and text[1].isdigit():
        return int(text, 8)
    return int(text, 0)


def _int_literal(node) -> int | None:
    if isinstance(node, c_ast.Constant) and "int" in node.type:
        return _c_int(node.value)
    return None


def _conjuncts(cond: E.Expr):
    if isinstance(cond, E.Binary) and cond.op == "and":
        return [*_conjuncts(cond.lhs), *_conjuncts(cond.rhs)]
    return [cond]


@functools.lru_cache(maxsize=None)
def _names_of(text: str) -> frozenset[str]:
    import ast
    return frozenset(n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)) \
        - {"min", "max"}


def _names_in(shape: tuple[str, ...]) -> set[str]:
    return {n for extent in shape for n in _names_of(extent)}


# ----- source to source ----------------------------------------------------------------------

def optimize_c_file(path, *, defines: dict | None = None, include_dirs=(), algorithm: str = "pluto",
                    **options) -> str:
    """The text of C file ``path`` with the body of every scop region (in that file) replaced by
    its loop nest scheduled with ``algorithm`` (``options`` as for :func:`polyopt.schedulers.registry`),
    checked by the verifier; parallel loops get ``#pragma omp parallel for``. The helpers the
    loops use are prepended, so the result builds with any C99 compiler (``polyopt cc``).
    A file without a region of its own (regions in headers it includes do not count) is a
    :class:`~polyopt.FrontendError`: there is nothing to optimize. The region's scalars stay
    the function's C variables (no scalar expansion: a temporary array would have no storage
    there), so ``expand_scalars=True`` is refused."""
    from polyopt.codegen.ast import build_loop_ast
    from polyopt.codegen.c import c_loop_nest, c_prelude, uses_half_types
    from polyopt.schedulers.registry import schedule
    from polyopt.analysis.verify import verify

    if options.get("expand_scalars"):
        raise FrontendError("polyopt cc keeps the scalars of a region (C variables of its function): "
                            "expand_scalars=True is an option of po.compile", source_name=str(path))
    options = {**options, "expand_scalars": False}
    lines = Path(path).read_text().splitlines(keepends=True)
    here = Path(path).resolve()
    kernels = [k for k in from_c(Path(path), defines=defines, include_dirs=include_dirs)
               if Path(k.region.file).resolve() == here]
    if not kernels:
        raise FrontendError(f"no scop found in {path}: mark the loops to optimize with '#pragma scop' "
                            "and '#pragma endscop'", source_name=str(path))
    for kernel in sorted(kernels, key=lambda k: -k.region.first_line):
        scop = kernel.scop
        chosen = schedule(scop, algorithm, **options)
        verify(scop, chosen)
        nest = c_loop_nest(scop, build_loop_ast(scop, chosen.tree), openmp=True, depth=1,
                           declare=list(kernel.inner_locals))
        block = ["{" + f"  /* {kernel.name}: polyopt {algorithm} schedule */", *nest, "}"]
        lines[kernel.region.first_line:kernel.region.last_line - 1] = [line + "\n" for line in block]
    return c_prelude(any(uses_half_types(k.scop) for k in kernels)) + "".join(lines)
