"""Optimizer and LambdaLR state_dict() / load_state_dict(): torch's layout
(a torch optimiser's state loads into attnc's and back, and both continue
alike), bit-exact round trips, no shared arrays, and clear errors."""

import numpy as np
import pytest
from test_optim import CONFIGS

import attnc


def model_and_torch(torch):
    model = attnc.nn.MultiheadAttention(8, 2, add_bias_kv=True, dtype=np.float64, seed=0)
    ref = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True).double()
    ref.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    return model, ref


def factor(epoch):
    return 0.9**epoch


def step_both(model, opt, sched, ref, ref_opt, ref_sched, rng, n):
    """n steps of the same gradients in attnc and torch (some parameters left without one)."""
    for i in range(n):
        grads = {k: rng.standard_normal(v.shape) for k, v in model.state_dict().items() if (i, k) != (0, "bias_k")}
        opt.step(grads)
        sched.step()
        for k, p in ref.named_parameters():
            p.grad = torch_tensor(ref, grads[k]) if k in grads else None
        ref_opt.step()
        ref_sched.step()


def torch_tensor(ref, a):
    return next(ref.parameters()).new_tensor(a)


def to_torch(torch, sd):
    """attnc's state_dict with tensors where torch keeps tensors (its "step" a float tensor)."""

    def value(k, v):
        return torch.tensor(float(v)) if k == "step" else torch.from_numpy(v) if isinstance(v, np.ndarray) else v

    return {
        "state": {i: {k: value(k, v) for k, v in s.items()} for i, s in sd["state"].items()},
        "param_groups": sd["param_groups"],
    }


def assert_same_parameters(model, ref):
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[k], v.numpy(), rtol=1e-12, atol=1e-14, err_msg=k)


def make(name, kwargs, owner, torch_module=None):
    if torch_module is not None:
        opt = getattr(torch_module.optim, name)(owner, **kwargs)
        return opt, torch_module.optim.lr_scheduler.LambdaLR(opt, factor)
    opt = getattr(attnc.optim, name)(owner, **kwargs)
    return opt, attnc.optim.LambdaLR(opt, factor)


@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_torch_state_continues_in_attnc(name, kwargs, rng, torch):
    model, ref = model_and_torch(torch)
    ref_opt, ref_sched = make(name, kwargs, ref.parameters(), torch)
    # torch trains alone, then its parameters and optimiser state go to a fresh attnc optimiser
    ghost_opt, ghost_sched = make(name, kwargs, model)
    step_both(model, ghost_opt, ghost_sched, ref, ref_opt, ref_sched, rng, 3)
    model.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    opt, sched = make(name, dict(kwargs, lr=123.0), model)  # the loaded lr wins
    opt.load_state_dict(ref_opt.state_dict())
    sched.load_state_dict(ref_sched.state_dict())
    assert opt.lr == ref_opt.param_groups[0]["lr"] and sched.last_epoch == ref_sched.last_epoch
    step_both(model, opt, sched, ref, ref_opt, ref_sched, rng, 3)
    assert_same_parameters(model, ref)


@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_attnc_state_continues_in_torch(name, kwargs, rng, torch):
    model, ref = model_and_torch(torch)
    opt, sched = make(name, kwargs, model)
    ghost_opt, ghost_sched = make(name, kwargs, ref.parameters(), torch)
    step_both(model, opt, sched, ref, ghost_opt, ghost_sched, rng, 3)
    ref.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    ref_opt, ref_sched = make(name, dict(kwargs, lr=123.0), ref.parameters(), torch)
    ref_opt.load_state_dict(to_torch(torch, opt.state_dict()))
    ref_sched.load_state_dict(sched.state_dict())
    step_both(model, opt, sched, ref, ref_opt, ref_sched, rng, 3)
    assert_same_parameters(model, ref)


@pytest.mark.parametrize("name,kwargs", CONFIGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_is_bit_exact_and_shares_nothing(name, kwargs, dtype, rng):
    model = attnc.nn.Linear(4, 3, dtype=dtype, seed=0)
    opt, sched = make(name, kwargs, model)

    def grads():
        return {k: rng.standard_normal(v.shape).astype(dtype) for k, v in model.state_dict().items()}

    for _ in range(3):
        opt.step(grads())
        sched.step()
    saved, saved_sched = opt.state_dict(), sched.state_dict()
    twin = attnc.nn.Linear(4, 3, dtype=dtype, seed=1)
    twin.load_state_dict(model.state_dict())
    opt2, sched2 = make(name, {}, twin)
    opt2.load_state_dict(saved)
    sched2.load_state_dict(saved_sched)
    assert_bitwise_equal(opt2.state_dict(), saved)
    assert sched2.state_dict() == saved_sched
    for state in saved["state"].values():  # the caller's arrays are not the optimiser's
        for v in state.values():
            if isinstance(v, np.ndarray):
                v += 1
    assert_bitwise_equal(opt.state_dict(), opt2.state_dict())
    for _ in range(2):
        g = grads()
        opt.step(g), opt2.step({k: v.copy() for k, v in g.items()})
        sched.step(), sched2.step()
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(twin.state_dict()[k], v, err_msg=k)
    assert_bitwise_equal(opt2.state_dict(), opt.state_dict())


def assert_bitwise_equal(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_bitwise_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    else:
        assert a == b


def test_float64_state_is_copied_to_float32_parameters():
    p = {"w": np.zeros(2, np.float32)}
    opt = attnc.optim.Adam(p)
    opt.load_state_dict(
        {
            "state": {0: {"step": 2, "exp_avg": np.ones(2), "exp_avg_sq": np.ones(2)}},
            "param_groups": [dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0, params=[0])],
        }
    )
    assert opt.state["w"]["exp_avg"].dtype == np.float32 and opt.betas == (0.9, 0.99) and opt.steps == 2


def adam_state(**changes):
    group = dict(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, params=[0, 1])
    state = {0: {"step": 1, "exp_avg": np.zeros((2, 3)), "exp_avg_sq": np.zeros((2, 3))}}
    sd = {"state": state, "param_groups": [group]}
    for k, v in changes.items():
        if k not in ("state", "param_groups"):
            group[k] = v
        else:
            sd[k] = v
    return sd


@pytest.mark.parametrize(
    "bad,message",
    [
        (dict(params=[0]), "lists 1 parameters, the optimiser has 2"),
        (
            dict(state={0: {"step": 1, "exp_avg": np.zeros((3, 2)), "exp_avg_sq": np.zeros((2, 3))}}),
            r"state\[0\]\['exp_avg'\] \(parameter weight\) has shape \(3, 2\), the parameter \(2, 3\)",
        ),
        (
            dict(state={0: {"step": 1, "m": np.zeros((2, 3)), "v": np.zeros((2, 3))}}),
            r"state\[0\] \(parameter weight\) has keys \['m', 'step', 'v'\], expected",
        ),
        (dict(state={5: {}}), "state has an entry 5, not among"),
        (
            dict(state={0: {"step": 1.5, "exp_avg": np.zeros((2, 3)), "exp_avg_sq": np.zeros((2, 3))}}),
            r"state\[0\]\['step'\] must be a whole number",
        ),
        (dict(amsgrad=True), "'amsgrad'.* is True: attnc's Adam implements only False"),
        (dict(decoupled_weight_decay=True), "implements only False"),  # an AdamW state into Adam
        (dict(nesterov=True), r"unknown keys \['nesterov'\]"),
        (dict(betas=(0.9, 1.5)), "betas must be two numbers in"),
        (dict(lr=-1.0), "lr must be >= 0"),
        (dict(param_groups=[]), "has 0 param_groups"),
        (dict(), None),
    ],
)
def test_bad_state_is_refused_and_changes_nothing(bad, message):
    model = attnc.nn.Linear(3, 2, dtype=np.float64, seed=0)
    opt = attnc.optim.Adam(model, lr=0.5)
    opt.step({"weight": np.ones((2, 3))})
    before = opt.state_dict()
    if message is None:  # the well-formed state loads (the cases above differ from it in one thing)
        opt.load_state_dict(adam_state(**bad))
        return
    with pytest.raises(ValueError, match=message):
        opt.load_state_dict(adam_state(**bad))
    assert_bitwise_equal(opt.state_dict(), before)


@pytest.mark.parametrize(
    "sd,message",
    [
        ({"last_epoch": 2}, r"missing \['base_lrs'\]"),
        ({"last_epoch": 2, "base_lrs": [1.0], "lr": 3}, r"unknown keys \['lr'\]"),
        ({"last_epoch": 2, "base_lrs": [1.0, 2.0]}, "base_lrs has 2 entries"),
        ({"last_epoch": -1, "base_lrs": [1.0]}, "last_epoch must be a whole number >= 0"),
    ],
)
def test_bad_schedule_state_is_refused(sd, message):
    sched = attnc.optim.LambdaLR(attnc.optim.SGD({"w": np.zeros(1)}, lr=1.0), factor)
    with pytest.raises(ValueError, match=message):
        sched.load_state_dict(sd)
    assert sched.last_epoch == 0 and sched.get_last_lr() == [1.0]
