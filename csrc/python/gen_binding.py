"""Generate attnc's Python binding from the operation table (csrc/python/ops/).

Each file in csrc/python/ops/ describes one family's operations as plain
data: a list OPS of op(...) entries, written with the names below (given to
the file when it is read: it imports nothing). An entry names the Python
function, the C entry point, and the C function's parameters in order: its
arrays (inputs, outputs), scalars (C type, default, range) and option or
weight structs (their fields by name). A family whose entry points or structs
are declared outside include/attnc.h lists their headers in INCLUDES (paths
relative to csrc/python/). From the table come, at build time:

- the C wrappers: keyword arguments only, each parsed into its tensor view,
  scalar or struct field, the C function run without the GIL, its status
  turned into the Python exception (csrc/python/args.c does the parsing);
- the module's method table (attnc_op_methods);
- the typed stub attnc/_core.pyi.

setup.py calls generate(); nothing generated is committed or edited by hand.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import runpy

HERE = os.path.dirname(os.path.abspath(__file__))

REQUIRED = object()  # a scalar with no default: the caller must pass it


# --------------------------------------------------------------------------- the table's vocabulary


@dataclasses.dataclass
class Arr:
    """A tensor view: `out` ones are written (writable buffers); None (or
    leaving it out) passes an absent tensor, which the C side checks.

    `ranks`: the ranks the C function accepts (it checks them; this says
    them, in the docstring and the stub, and tests/test_binding.py holds C to
    it): an int, a tuple of ints, or "n+" (n or more: leading batch dims);
    None where any rank goes (elementwise, or a flat buffer of checked size)."""

    name: str
    out: bool = False
    field: str | None = None  # the struct member it fills, when not `name`
    ranks: int | tuple | str | None = None


@dataclasses.dataclass
class Scalar:
    """A scalar of C type `kind`: "double", "int64", "uint64", "bool" or an
    enum type (an int in [lo, hi] cast to it)."""

    name: str
    kind: str
    default: object = REQUIRED
    lo: object = None
    hi: object = None
    field: str | None = None


@dataclasses.dataclass
class Ints:
    """n int64s, from any sequence of n ints (a pair of strides, four paddings)."""

    name: str
    n: int
    field: str | None = None


@dataclasses.dataclass
class Absent:
    """An absent tensor the Python side never passes (an unused operand)."""


@dataclasses.dataclass
class ScalarOut:
    """A double the C function writes through the struct member `field` (a
    `double *`, of a flattened or a named struct), pointed at only when the
    call's bool keyword argument `want` (default False) is true: NULL tells
    the C function it is not wanted. The wrapper returns every scalar_out of
    the op, in table order, as a tuple of floats (0.0 where not wanted)."""

    name: str
    field: str
    want: str


@dataclasses.dataclass
class Want:
    """The call's keyword argument asking for a scalar_out (`of.want`)."""

    of: ScalarOut


@dataclasses.dataclass
class Struct:
    """A C struct passed by pointer. Without a name its members are keyword
    arguments of the call; with one, the call takes a dict of them under that
    name (a set of weights, whose gradients, another dict, share its keys)."""

    ctype: str
    members: tuple
    name: str | None = None


@dataclasses.dataclass
class StructList:
    """A list of dicts, each a `ctype` struct with these members (a stack of
    layers): passed as a pointer to the first and their count, or, as a member
    of a struct, stored in its members `field` (the pointer) and `count`."""

    name: str
    ctype: str
    members: tuple
    field: str | None = None
    count: str | None = None


@dataclasses.dataclass
class Op:
    name: str
    c_function: str
    params: tuple
    returns: str = "status"  # "status" (None), or "int64" (the C function returns a size)
    doc: str = ""


def op(name, c_function, *params, returns="status", doc=""):
    return Op(name, c_function, params, returns, doc)


def arr(name, field=None, ranks=None):
    return Arr(name, False, field, ranks)


def out(name, field=None, ranks=None):
    return Arr(name, True, field, ranks)


def real(name, default=REQUIRED, lo=None, hi=None, field=None):
    return Scalar(name, "double", default, lo, hi, field)


def i64(name, default=REQUIRED, lo=None, hi=None, field=None):
    return Scalar(name, "int64", default, lo, hi, field)


def u64(name, default=0, field=None):
    return Scalar(name, "uint64", default, field=field)


def flag(name, default=False, field=None):
    return Scalar(name, "bool", default, field=field)


def enum(name, ctype, count, default=REQUIRED, field=None):
    return Scalar(name, ctype, default, 0, count - 1, field)


def ints(name, n, field=None):
    return Ints(name, n, field)


def absent():
    return Absent()


def scalar_out(name, field, want):
    return ScalarOut(name, field, want)


def struct(ctype, *members, name=None):
    return Struct(ctype, members, name)


def struct_list(name, ctype, *members, field=None, count=None):
    return StructList(name, ctype, members, field, count)


VOCABULARY = {
    f.__name__: f for f in (op, arr, out, real, i64, u64, flag, enum, ints, absent, scalar_out, struct, struct_list)
}


def _families() -> list[dict]:
    """Each family file's globals, in name order."""
    return [
        runpy.run_path(path, init_globals=dict(VOCABULARY))
        for path in sorted(glob.glob(os.path.join(HERE, "ops", "*.py")))
    ]


def load_includes() -> list[str]:
    """The headers the families name in INCLUDES (their C types and entry
    points outside include/attnc.h), each once, in order."""
    return list(dict.fromkeys(h for family in _families() for h in family.get("INCLUDES", ())))


def load_table() -> list[Op]:
    """Every family's OPS, family files in name order."""
    ops = [o for family in _families() for o in family["OPS"]]
    names = [o.name for o in ops]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"operations described twice: {duplicated}")
    return ops


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def table_files() -> list[str]:
    return [os.path.abspath(__file__)] + sorted(glob.glob(os.path.join(HERE, "ops", "*.py")))


def arrays(o: Op):
    """(path, Arr) of each array the call takes: path is (keyword,) for a
    keyword argument, (keyword, key) for a member of a dict (a named struct;
    each dict of a list of them)."""
    for name, spec, _ in _keywords(o):
        if isinstance(spec, Arr):
            yield (name,), spec
        elif isinstance(spec, (Struct, StructList)):
            yield from (((name, m.name), m) for m in spec.members if isinstance(m, Arr))


def rank_text(ranks) -> str:
    """The ranks as the docstring says them: "2", "1 or 2", ">= 2", "any"."""
    if ranks is None:
        return "any"
    if isinstance(ranks, str):
        return ">= " + ranks.rstrip("+")
    if isinstance(ranks, int):
        return str(ranks)
    return " or ".join(map(str, ranks))


def docstring(o: Op) -> str:
    """The method's docstring: the table's doc (or the C entry point), then
    each array with the ranks C accepts."""
    lines = [o.doc or o.c_function, "", "Arrays (the ranks the C function accepts; * written):"]
    for path, a in arrays(o):
        name = path[0] + "".join(f"[{k!r}]" for k in path[1:])
        lines.append(f"  {name}{' *' if a.out else ''}: {rank_text(a.ranks)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- C

C_TYPES = {"double": "double", "int64": "int64_t", "uint64": "uint64_t", "bool": "int"}


def _keywords(o: Op) -> list:
    """The call's keyword arguments in order: (name, spec, the struct it fills or None)."""
    out_ = []
    for p in o.params:
        if isinstance(p, Struct) and p.name is None:
            out_ += [(m.want, Want(m), p) if isinstance(m, ScalarOut) else (m.name, m, p) for m in p.members]
        elif not isinstance(p, Absent):
            out_.append((p.name, p, None))
        if isinstance(p, Struct) and p.name is not None:  # a named struct's wants are the call's keywords
            out_ += [(m.want, Want(m), p) for m in p.members if isinstance(m, ScalarOut)]
    names = [n for n, _, _ in out_]
    if len(set(names)) != len(names):
        raise ValueError(f"{o.name}: a keyword argument is named twice: {names}")
    return out_


def _literal(value, kind) -> str:
    if kind == "double":
        return (
            repr(float(value))
            if value not in (float("inf"), float("-inf"))
            else ("INFINITY" if value > 0 else "-INFINITY")
        )
    if kind == "bool":
        return "1" if value else "0"
    return str(int(value))


def _scalar_code(s: Scalar, src: str, dst: str) -> str:
    """Parse keyword value `src` (NULL: not passed) into the lvalue `dst`."""
    has_default = s.default is not REQUIRED
    default = _literal(s.default, s.kind if s.kind in C_TYPES else "int64") if has_default else "0"
    if s.kind == "double":
        lo = "-INFINITY" if s.lo is None else _literal(s.lo, "double")
        hi = "INFINITY" if s.hi is None else _literal(s.hi, "double")
        return f'args_double({src}, "{s.name}", {int(has_default)}, {default}, {lo}, {hi}, &{dst})'
    if s.kind == "uint64":
        return f'args_uint64({src}, "{s.name}", {int(has_default)}, {default}ULL, &{dst})'
    if s.kind == "bool":
        return f'args_bool({src}, "{s.name}", {int(has_default)}, {default}, &{dst})'
    lo = "INT64_MIN" if s.lo is None else str(int(s.lo))
    hi = "INT64_MAX" if s.hi is None else str(int(s.hi))
    if s.kind == "int64":
        return f'args_int64({src}, "{s.name}", {int(has_default)}, {default}, {lo}, {hi}, &{dst})'
    # an enum: read as int64, stored as its C type
    return (
        f'args_enum({src}, "{s.name}", {int(has_default)}, {default}, {lo}, {hi}, &e_{s.name}) && '
        f"(({dst} = ({s.kind})e_{s.name}), 1)"
    )


def _member_code(m, src: str, dst: str, held: str = "&h") -> list[str]:
    """Statements (each an int expression, 0 on failure) parsing src into dst."""
    if isinstance(m, Arr):
        return [f'buffers_get({held}, {src}, "{m.name}", {int(m.out)}, &{dst})']
    if isinstance(m, Scalar):
        return [_scalar_code(m, src, dst)]
    if isinstance(m, Ints):
        return [f'args_ints({src}, "{m.name}", {m.n}, {dst})']
    raise TypeError(m)


def _wrapper(o: Op) -> str:
    kws = _keywords(o)
    n = len(kws)
    lines = [
        f"static PyObject *py_{o.name}(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {{",
        "    (void)self;",
        f"    PyObject *v[{max(n, 1)}] = {{NULL}};",
        f'    if (!args_take("{o.name}", args, nargs, kwnames, KEYS_{o.name}, {n}, v)) return NULL;',
        "    buffers h = {.count = 0};",
    ] + (["    attnc_status st = ATTNC_OK;"] if o.returns == "status" else [])
    decls, parse, call_args, after = [], [], [], []
    struct_vars = {}
    for i, p in enumerate(o.params):
        var = f"a{i}"
        if isinstance(p, Arr):
            decls.append(f"attnc_tensor {var};")
            call_args.append(f"&{var}")
        elif isinstance(p, Absent):
            decls.append(f"attnc_tensor {var} = {{.data = NULL}};")
            call_args.append(f"&{var}")
        elif isinstance(p, Scalar):
            decls.append(f"{C_TYPES.get(p.kind, p.kind)} {var};")
            decls += _enum_decls(p)
            call_args.append(var)
        elif isinstance(p, Ints):
            decls.append(f"int64_t {var}[{p.n}];")
            call_args.append(var)
        elif isinstance(p, Struct):
            decls.append(f"{p.ctype} {var};")
            decls.append(f"memset(&{var}, 0, sizeof {var});")
            call_args.append(f"&{var}")
            struct_vars[id(p)] = var
            if p.name is not None:
                idx = next(k for k, (nm, _, _) in enumerate(kws) if nm == p.name)
                members = [m for m in p.members if not isinstance(m, ScalarOut)]
                fields = _field_set(members)
                decls.append(f"PyObject *d{i}[{max(len(members), 1)}] = {{NULL}};")
                parse.append(f'args_dict(v[{idx}], "{p.name}", {fields}, {len(members)}, d{i})')
                for j, m in enumerate(members):
                    decls += _enum_decls(m)
                    parse += _member_code(m, f"d{i}[{j}]", f"{var}.{m.field or m.name}")
        elif isinstance(p, StructList):
            idx = next(k for k, (nm, _, _) in enumerate(kws) if nm == p.name)
            _list_code(o, str(i), p, f"v[{idx}]", decls, parse, after)
            call_args += [f"l{i}", f"n{i}"]
    # keyword arguments: arrays, scalars, flattened struct members and the wants of scalar_outs
    for k, (_, spec, owner) in enumerate(kws):
        if isinstance(spec, Struct) or (isinstance(spec, StructList) and owner is None):
            continue
        if owner is None:
            parse += _member_code(spec, f"v[{k}]", f"a{o.params.index(spec)}")
        else:
            var = struct_vars[id(owner)]
            if isinstance(spec, StructList):  # a struct's member list: its pointer and count into the struct
                tag = f"{o.params.index(owner)}_{k}"
                _list_code(o, tag, spec, f"v[{k}]", decls, parse, after)
                parse.append(f"(({var}.{spec.field} = l{tag}), ({var}.{spec.count} = n{tag}), 1)")
                continue
            if isinstance(spec, Want):
                s = spec.of
                decls += [f"double {s.name} = 0;", f"int want_{s.name};"]
                parse.append(f'args_bool(v[{k}], "{s.want}", 1, 0, &want_{s.name})')
                parse.append(f"(({var}.{s.field} = want_{s.name} ? &{s.name} : NULL), 1)")
                continue
            decls += _enum_decls(spec)
            parse += _member_code(spec, f"v[{k}]", f"{var}.{spec.field or spec.name}")
    returns = [s for s in _all_members(o) if isinstance(s, ScalarOut)]
    lines += [f"    {d}" for d in decls]
    if parse:
        lines.append("    if (!(" + " &&\n          ".join(parse) + "))")
        lines.append("        return " + "".join(f"{a}, " for a in after) + "buffers_release(&h), NULL;")
    call = f"{o.c_function}({', '.join(call_args)})"
    if o.returns == "int64":
        lines.append(f"    int64_t r = {call};")
        lines += [f"    {a};" for a in after]
        lines.append("    buffers_release(&h);")
        lines.append("    return PyLong_FromLongLong((long long)r);")
    else:
        lines.append(f"    ATTNC_NOGIL(st, {call});")
        lines += [f"    {a};" for a in after]
        if returns:
            lines.append("    if (st != ATTNC_OK) return buffers_finish(&h, st);")
            lines.append("    buffers_release(&h);")
            fmt = "(" + "d" * len(returns) + ")"
            lines.append(f'    return Py_BuildValue("{fmt}", {", ".join(s.name for s in returns)});')
        else:
            lines.append("    return buffers_finish(&h, st);")
    lines.append("}")
    return "\n".join(lines)


def _enum_decls(m) -> list[str]:
    return [f"int64_t e_{m.name};"] if isinstance(m, Scalar) and m.kind not in C_TYPES else []


def _all_members(o: Op):
    for p in o.params:
        if isinstance(p, Struct):
            yield from p.members
        else:
            yield p


def _list_code(o: Op, tag: str, p: StructList, src: str, decls: list, parse: list, after: list) -> None:
    """Read the list in keyword value src into l<tag> (its structs, freed
    after the call) and n<tag> (their count)."""
    decls += [f"{p.ctype} *l{tag} = NULL;", f"Py_ssize_t n{tag} = 0;"]
    parse.append(f'args_list({src}, "{p.name}", sizeof *l{tag}, (void **)&l{tag}, &n{tag})')
    parse.append(f"parse_{o.name}_{tag}(&h, {src}, l{tag}, n{tag})")
    after.append(f"PyMem_Free(l{tag})")


def _lists(o: Op):
    """(tag, StructList) of each list the call reads (see _list_code)."""
    kws = _keywords(o)
    for i, p in enumerate(o.params):
        if isinstance(p, StructList):
            yield str(i), p
        elif isinstance(p, Struct) and p.name is None:
            yield from (
                (f"{i}_{k}", m) for k, (_, m, owner) in enumerate(kws) if owner is p and isinstance(m, StructList)
            )


def _list_parser(o: Op, tag: str, p: StructList) -> str:
    """parse_<op>_<tag>: each dict of the list into its struct."""
    fields = _field_set(p.members)
    lines = [
        f"static int parse_{o.name}_{tag}(buffers *h, PyObject *list, {p.ctype} *items, Py_ssize_t n) {{",
        "    for (Py_ssize_t k = 0; k < n; k++) {",
        f"        PyObject *d[{max(len(p.members), 1)}] = {{NULL}};",
        f'        if (!args_dict(PyList_GetItem(list, k), "{p.name}", {fields}, {len(p.members)}, d)) return 0;',
    ]
    for j, m in enumerate(p.members):
        for e in _enum_decls(m):
            lines.append(f"        {e}")
        for stmt in _member_code(m, f"d[{j}]", f"items[k].{m.field or m.name}", held="h"):
            lines.append(f"        if (!({stmt})) return 0;")
    lines += ["    }", "    return 1;", "}"]
    return "\n".join(lines)


# The member names of the dicts the wrappers read (weights, list items): each
# distinct set once, as C strings and as the interned keys args_dict matches
# the dict's keys against. Filled while c_source writes.
_FIELD_SETS: dict = {}


def _field_set(members) -> str:
    """`FIELDKEYS_<k>`: the keys args_dict takes for these members' names."""
    names = tuple(m.name for m in members)
    k = _FIELD_SETS.setdefault(names, len(_FIELD_SETS))
    return f"FIELDKEYS_{k}"


def c_source(ops: list[Op], includes: list[str] = ()) -> str:
    _FIELD_SETS.clear()
    body = _c_body(ops)
    parts = (
        [
            "/* Generated by csrc/python/gen_binding.py from csrc/python/ops/: do not edit. */",
            "#include <math.h>",
            "#include <stdint.h>",
            "#include <string.h>",
            "",
            '#include "args.h"',
        ]
        + [f'#include "{h}"' for h in includes]
        + [""]
    )
    for names, k in _FIELD_SETS.items():
        parts.append(f"static const char *const FIELDS_{k}[] = {{" + ", ".join(f'"{n}"' for n in names) + "};")
        parts.append(f"static PyObject *FIELDKEYS_{k}[{max(len(names), 1)}];")
    return "\n".join(parts + body) + "\n"


def _c_body(ops: list[Op]) -> list[str]:
    parts = []
    for o in ops:
        names = [nm for nm, _, _ in _keywords(o)]
        parts.append(f"static PyObject *KEYS_{o.name}[{max(len(names), 1)}];")
        parts.append(
            f"static const char *const NAMES_{o.name}[] = {{"
            + ", ".join(f'"{nm}"' for nm in names)
            + ("" if names else "NULL")
            + "};"
        )
    parts.append("")
    for o in ops:
        for tag, p in _lists(o):
            parts.append(_list_parser(o, tag, p))
            parts.append("")
        parts.append(_wrapper(o))
        parts.append("")
    parts.append("PyMethodDef attnc_op_methods[] = {")
    for o in ops:
        doc = docstring(o).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(
            f'    {{"{o.name}", (PyCFunction)(void (*)(void))py_{o.name}, METH_FASTCALL | METH_KEYWORDS, "{doc}"}},'
        )
    parts.append("    {NULL, NULL, 0, NULL}};")
    parts.append("")
    parts.append("int attnc_op_keys_init(void) {")
    for o in ops:
        n = len(_keywords(o))
        if n:
            parts.append(f"    if (!args_intern(NAMES_{o.name}, KEYS_{o.name}, {n})) return 0;")
    for names, k in _FIELD_SETS.items():
        parts.append(f"    if (!args_intern(FIELDS_{k}, FIELDKEYS_{k}, {len(names)})) return 0;")
    parts.append("    return 1;")
    parts.append("}")
    return parts


# --------------------------------------------------------------------------- the stub

PY_TYPES = {"double": "float", "int64": "int", "uint64": "int", "bool": "bool"}


def _py_param(spec) -> str:
    if isinstance(spec, Arr):
        return f"{spec.name}: Buffer | None = None"
    if isinstance(spec, Scalar):
        t = PY_TYPES.get(spec.kind, "int")
        return f"{spec.name}: {t}" + ("" if spec.default is REQUIRED else " = ...")
    if isinstance(spec, Ints):
        return f"{spec.name}: Sequence[int]"
    if isinstance(spec, Want):
        return f"{spec.of.want}: bool = ..."
    if isinstance(spec, Struct):  # args_dict and args_list take these exact types
        return f"{spec.name}: dict[str, Any]"
    if isinstance(spec, StructList):
        return f"{spec.name}: list[dict[str, Any]]"
    raise TypeError(spec)


def stub(ops: list[Op]) -> str:
    lines = [
        '"""attnc\'s C core (generated by csrc/python/gen_binding.py from csrc/python/ops/)."""',
        "",
        "from collections.abc import Sequence",
        "from typing import Any",
        "",
        "from numpy.typing import NDArray",
        "",
        "Buffer = NDArray[Any]",
        "",
    ]
    for o in ops:
        params = [_py_param(s) for nm, s, _ in _keywords(o)]
        returns = [s for s in _all_members(o) if isinstance(s, ScalarOut)]
        ret = (
            "int" if o.returns == "int64" else (f"tuple[{', '.join(['float'] * len(returns))}]" if returns else "None")
        )
        signature = f"def {o.name}(*, {', '.join(params)}) -> {ret}:" if params else f"def {o.name}() -> {ret}:"
        doc = docstring(o).replace("\n", "\n    ").replace("    \n", "\n")
        lines += [signature, f'    """{doc}"""', ""]
    lines += [
        "",
        "# configuration (csrc/python/module.c)",
        "def set_num_threads(n: int, /) -> None: ...",
        "def get_num_threads() -> int: ...",
        "def blas_info() -> str: ...",
        "def blas_threads() -> int: ...",
        "def simd_path() -> str: ...",
        "def cpu_paths() -> str: ...",
        "def fingerprints(arrays: Sequence[Buffer], /) -> tuple[int, ...]: ...",
        "def has_unit_stride(array: Buffer, /) -> bool: ...",
    ]
    return "\n".join(lines) + "\n"


def generate(c_path: str, stub_path: str | None = None) -> None:
    """Write the wrappers to c_path (and the stub to stub_path), each only if
    it changed (so a rebuild compiles only what did)."""
    ops = load_table()
    for path, text in ((c_path, c_source(ops, load_includes())), (stub_path, stub(ops))):
        if path is None:
            continue
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if not os.path.exists(path) or _read(path) != text:
            with open(path, "w") as f:
                f.write(text)
