"""The eager path: attnc called directly, with a light autograd node.

A torch custom op costs about 0.1 ms a call in its Python dispatcher (and
its backward op redoes the argument checks), which dwarfs attnc's kernels at
small sizes. In eager mode on plain CPU tensors nothing needs the dispatcher:
attnc's function runs on the tensors' memory, and when a gradient is wanted
one ``torch.autograd.Function`` node keeps attnc's own saved state (what
``attnc.vjp`` keeps) for attnc's C backward. Under ``torch.compile`` (and
``torch.export``, and for tensor subclasses such as fake or functional
tensors) the registered custom ops run instead, so the graph holds them.
Both paths call the same C forward and backward: the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.autograd.function import once_differentiable

# differentiable -> (the outputs, the indices of the non-differentiable ones,
# and when differentiable the pullback: (the outputs' cotangents (None for an
# unused one), whether each input needs its gradient) -> one gradient or
# None per input)
Run = Callable[[bool], tuple[list[torch.Tensor], Sequence[int], Callable | None]]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def eager(*tensors: torch.Tensor | None) -> bool:
    """Whether attnc may be called directly: not tracing, no torch.func
    transform (grad, vmap: their wrapped tensors have no memory to view;
    the op raises torch's own message for them), no dispatch mode
    (FlopCounterMode, a tracer: it is shown the op), and every tensor a
    plain torch.Tensor or Parameter (another subclass, such as a fake
    tensor, needs the op)."""
    if (
        torch.compiler.is_compiling()
        or torch._C._are_functorch_transforms_active()
        or torch._C._len_torch_dispatch_stack()
    ):
        return False
    return all(t is None or type(t) in _PLAIN for t in tensors)


def run(call: Run, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """call's outputs, through an autograd node whose backward is call's
    pullback when one of the (floating-point) inputs requires a gradient."""
    if torch.is_grad_enabled():
        for t in inputs:
            if t.requires_grad:
                return list(_Node.apply(call, *inputs))
    return call(False)[0]


class _Node(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, *inputs):
        outputs, frozen, pullback = call(True)
        ctx.pullback = pullback
        ctx.save_for_backward(*inputs)  # so torch refuses the backward if one is changed in place
        ctx.mark_non_differentiable(*(outputs[i] for i in frozen))
        ctx.set_materialize_grads(False)  # an unused output's cotangent stays None: the C backward skips its work
        return tuple(outputs)

    @staticmethod
    @once_differentiable  # attnc's backward is not itself differentiable: a double backward raises
    def backward(ctx, *cotangents):
        ctx.saved_tensors  # noqa: B018  (the in-place check)
        return (None, *ctx.pullback(cotangents, ctx.needs_input_grad[1:]))
