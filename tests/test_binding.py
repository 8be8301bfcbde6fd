"""The binding generated from the operation table (csrc/python/ops/,
csrc/python/gen_binding.py): every described operation is in the extension
and in its typed stub with the table's keywords, and calls that get the
keywords wrong fail with a clear exception, never a crash."""

import ast
import runpy
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc import _core

ROOT = Path(__file__).resolve().parents[1]
GEN = runpy.run_path(str(ROOT / "csrc" / "python" / "gen_binding.py"))
OPS = GEN["load_table"]()
STUB = Path(attnc.__file__).resolve().parent / "_core.pyi"


def keywords(op) -> list:
    return [n for n, spec, _ in GEN["_keywords"](op) if not isinstance(spec, GEN["ScalarOut"])]


def test_every_operation_is_in_the_extension():
    for op in OPS:
        assert callable(getattr(_core, op.name, None)), op.name
        doc = getattr(_core, op.name).__doc__
        assert doc == GEN["docstring"](op), op.name
        assert doc.startswith(op.doc or op.c_function)
        for path, a in GEN["arrays"](op):  # each array with the ranks the table gives it
            assert (
                f"\n  {path[0]}{''.join(f'[{k!r}]' for k in path[1:])}{' *' if a.out else ''}: "
                f"{GEN['rank_text'](a.ranks)}" in doc
            ), (op.name, path)


def test_the_stub_lists_every_operation_with_its_keywords():
    tree = ast.parse(STUB.read_text())
    stubbed = {f.name: [a.arg for a in f.args.kwonlyargs] for f in tree.body if isinstance(f, ast.FunctionDef)}
    for op in OPS:
        assert stubbed.get(op.name) == keywords(op), op.name
    assert GEN["stub"](OPS) == STUB.read_text(), "attnc/_core.pyi is not the one the table makes: rebuild"


def test_keywords_only():
    x, w = np.ones((2, 3)), np.ones((4, 3))
    y = np.empty((2, 4))
    with pytest.raises(TypeError, match=r"linear_forward\(\) takes keyword arguments only"):
        _core.linear_forward(y, x, w, None)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'inptu'"):
        _core.linear_forward(output=y, inptu=x, weight=w)
    _core.linear_forward(output=y, input=x, weight=w)  # bias left out: absent
    np.testing.assert_array_equal(y, x @ w.T)


def test_scalars_are_checked_by_name():
    x = np.ones((2, 3))
    y, mean, rstd = np.empty_like(x), np.empty(2), np.empty(2)
    kw = dict(output=y, mean=mean, rstd=rstd, input=x)
    with pytest.raises(TypeError, match="missing required argument 'eps'"):
        _core.layer_norm_forward(**kw)
    with pytest.raises(ValueError, match=r"eps must be in \[0, inf\], got -1"):
        _core.layer_norm_forward(**kw, eps=-1.0)
    with pytest.raises(TypeError, match="missing required argument 'eps'"):  # None is not a value
        _core.layer_norm_forward(**kw, eps=None)
    with pytest.raises(ValueError, match=r"eps must be a number, got nan"):
        _core.layer_norm_forward(**kw, eps=float("nan"))
    with pytest.raises(TypeError, match="eps must be a number"):
        _core.layer_norm_forward(**kw, eps="small")
    z = np.empty_like(x)
    with pytest.raises(ValueError, match=r"activation must be in \[0, 3\], got 7"):
        _core.activation_forward(output=z, input=x, activation=7)
    with pytest.raises(ValueError, match="seed must be an int in"):
        _core.activation_forward(output=z, input=x, activation=1, seed=-1)


def test_dict_members_are_matched_by_name_in_any_order():
    # args_dict matches each key to a member: by the interned name, or by value
    # for a key built at run time; absent members take their defaults; any
    # other key (a string or not) is named
    r = np.random.default_rng(0)
    q, k, v = r.standard_normal((2, 3)), r.standard_normal((4, 3)), r.standard_normal((4, 2))

    def context(params):
        out = np.empty((2, 2)), np.empty((2, 4))
        _core.attention_forward(context=out[0], weights=out[1], query=q, keys=k, values=v, params=params)
        return out[0]

    want = context({"kind": 1, "scale": 0.5})
    np.testing.assert_array_equal(context({"scale": 0.5, "kind": 1}), want)
    np.testing.assert_array_equal(context({"".join(["ki", "nd"]): 1, "".join(["sc", "ale"]): 0.5}), want)
    np.testing.assert_array_equal(context({"kind": 1}), context({"kind": 1, "scale": 1.0}))  # the default
    assert not np.array_equal(context({"kind": 1}), want)
    got = np.empty((2, 2)), np.empty((2, 4))
    for bad in ({"kind": 1, "scael": 1.0}, {"kind": 1, 3: 1.0}):
        with pytest.raises(TypeError, match="params has an unexpected key"):
            _core.attention_forward(context=got[0], weights=got[1], query=q, keys=k, values=v, params=bad)


def test_arrays_are_checked_by_name():
    x = np.ones((2, 3))
    with pytest.raises(TypeError, match="output must be a writable buffer"):
        _core.linear_forward(output=np.broadcast_to(0.0, (2, 4)), input=x, weight=np.ones((4, 3)))
    with pytest.raises(TypeError, match="weight must be a buffer of numbers, got str"):
        _core.linear_forward(output=np.empty((2, 4)), input=x, weight="w")


# --------------------------------------------------------------------------- the table's ranks, held to C


def _arrays(kw):
    """(path, array) of each array a recorded call passed: (keyword,),
    (keyword, key) in a dict, (keyword, i, key) in a list of dicts."""
    for k, v in kw.items():
        if isinstance(v, np.ndarray):
            yield (k,), v
        elif isinstance(v, dict):
            yield from (((k, m), a) for m, a in v.items() if isinstance(a, np.ndarray))
        elif isinstance(v, list):
            yield from (((k, i, m), a) for i, d in enumerate(v) for m, a in d.items() if isinstance(a, np.ndarray))


def _extra_calls():
    """Public calls reaching the operations test_empty's cases do not."""
    import attnc.datasets

    rng = np.random.default_rng(0)
    opt = attnc.optim.Adam({"p": np.ones((2, 3))})
    opt.step({"p": np.ones((2, 3))})
    targets = np.arange(4)[None].repeat(2, 0)
    attnc.models.PointerNet(2, 6, dtype=np.float64, seed=0)(rng.random((2, 4, 2)), targets, lengths=[4, 4])
    points = rng.random((2, 5, 2))
    for exact in (True, False):
        tours, _ = attnc.datasets.tsp_tours(points, exact=exact)
    attnc.datasets.tsp_tours(points, exact=False, or_opt=True)
    attnc.datasets.tour_length(points, tours)
    attnc.datasets.ConvexHullTask().batch(2, seed=0)


@pytest.fixture(scope="module")
def recorded():
    """op name -> valid calls' keyword arguments (float64): test_empty's cases
    (every public name, forward and backward) and _extra_calls, each call kept
    when it passes an array its op had not been seen with."""
    import test_empty as cases

    calls, seen, real = {}, {}, {op.name: getattr(_core, op.name) for op in OPS}

    def recording(name):
        def call(**kw):
            new = {tuple(p for p in path if not isinstance(p, int)) for path, _ in _arrays(kw)} - seen.setdefault(
                name, set()
            )
            if new:
                seen[name] |= new
                calls.setdefault(name, []).append((dict(kw), new))
            return real[name](**kw)

        return call

    for name in real:
        setattr(_core, name, recording(name))
    try:
        for case in cases.CASES:
            cases.run(case, cases.Dims(np.float64))
        _extra_calls()
    finally:
        for name, fn in real.items():
            setattr(_core, name, fn)
    return calls


def _reranked(a, rank):
    """a's elements at another rank: leading 1s added, or the leading dims merged."""
    if rank == 0:
        return np.zeros((), a.dtype)
    if rank > a.ndim:
        return a.reshape((1,) * (rank - a.ndim) + a.shape)
    return a.reshape((-1,) + a.shape[a.ndim - rank + 1 :])


def _replaced(kw, path, new):
    kw = dict(kw)
    if len(path) == 1:
        kw[path[0]] = new
    elif len(path) == 2:
        kw[path[0]] = {**kw[path[0]], path[1]: new}
    else:
        items = list(kw[path[0]])
        items[path[1]] = {**items[path[1]], path[2]: new}
        kw[path[0]] = items
    return kw


def _allowed(ranks) -> set:
    """The ranks (up to 5) a table entry allows."""
    if isinstance(ranks, str):
        return set(range(int(ranks.rstrip("+")), 6))
    return {ranks} if isinstance(ranks, int) else set(ranks)


def _labels(op_name) -> dict:
    """The names C gives arrays in its messages where they are not the
    table's keys (name -> the names accepted): the parameters' state_dict
    names, as the modules map them."""
    from attnc.models import captioner, ntm
    from attnc.nn import transformer

    maps = [{"positions_out": "positions"}]
    if op_name.startswith("captioner"):
        maps.append(captioner.PARAM_NAMES)
    if op_name.startswith("ntm"):
        maps.append(ntm.NTM._PARAM_NAMES["lstm"])
    if op_name in ("layer_forward", "layer_backward", "decode"):  # an encoder's or a decoder's layer
        maps += [
            transformer._layer_param_names(False),
            transformer._layer_param_names(True),
            {"norm_weight": "norm.weight", "norm_bias": "norm.bias"},
        ]
    if op_name == "pointer_decode":
        maps.append(
            {
                "w_ih": "decoder.weight_ih_l0",
                "w_hh": "decoder.weight_hh_l0",
                "b_ih": "decoder.bias_ih_l0",
                "b_hh": "decoder.bias_hh_l0",
                "w2": "W2.weight",
            }
        )
    labels = {}
    for m in maps:
        for key, label in m.items():
            labels.setdefault(key, set()).add(label)
    return labels


def test_every_operation_is_reached_by_the_recorded_calls(recorded):
    assert sorted(op.name for op in OPS if op.name not in recorded and any(GEN["arrays"](op))) == []


def test_arrays_of_a_rank_the_table_excludes_are_refused_by_c_naming_them(recorded):
    """For each array a valid call passed: its rank is one the table allows,
    and the same elements at the ranks next to it (and 0) the table excludes
    are refused by the C function with a ValueError naming the array (a wrong
    entry, or a C function that stopped checking, fails)."""
    wrong = []
    for op in OPS:
        specs = dict(GEN["arrays"](op))
        labels = _labels(op.name)
        for kw, new in recorded.get(op.name, ()):
            for path, a in _arrays(kw):
                key = tuple(p for p in path if not isinstance(p, int))
                if key not in new or specs[key].ranks is None or (len(path) == 3 and path[1] > 0):
                    continue  # seen before, any rank, or a list's later items (the first stands for them)
                name, allowed = key[-1], _allowed(specs[key].ranks)
                if a.ndim not in allowed:
                    wrong.append(f"{op.name} {key}: a valid call passes rank {a.ndim}, the table allows {allowed}")
                for rank in sorted({0, a.ndim - 1, a.ndim + 1} - allowed - {-1}):
                    try:
                        getattr(_core, op.name)(**_replaced(kw, path, _reranked(a.copy(), rank)))
                        wrong.append(f"{op.name} {key} at rank {rank}: accepted")
                    except ValueError as e:
                        if not any(n in str(e) for n in {name, *labels.get(name, ())}):
                            wrong.append(f"{op.name} {key} at rank {rank}: {e}")
                    except (TypeError, RuntimeError) as e:  # another type: the wrong one
                        wrong.append(f"{op.name} {key} at rank {rank}: {type(e).__name__}: {e}")
    assert not wrong, "\n".join(wrong)
