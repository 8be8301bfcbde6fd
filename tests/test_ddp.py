"""examples/ddp_train.py under torchrun: 2 local processes over 127.0.0.1
(gloo), a few steps in float64. The gradients DDP all-reduced at the first
step equal one process's gradients over the whole batch, computed by attnc
alone (attnc.models.GPT.loss_and_grads: attnc's cross-entropy and C
backward, no torch, no DDP), to 1e-6 relative; both ranks hold identical
parameters afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
STEPS, BATCH = 3, 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_example(folder: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(EXAMPLE),
        "--steps",
        str(STEPS),
        "--batch-size",
        str(BATCH),
        "--threads",
        "1",
        "--dtype",
        "float64",
        "--dump",
        str(folder),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_ddp_gradients_are_the_whole_batch_gradients(tmp_path, torch):
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import ddp_train
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    result = run_example(tmp_path)
    assert result["processes"] == 2 and result["threads_per_process"] == 1 and result["steps"] == STEPS
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]

    gpt = ddp_train.build_model("float64", 0).attnc_module  # the seed's initial parameters
    initial = gpt.state_dict()
    train = ddp_train.sort_task(STEPS * BATCH, ddp_train.LENGTH, ddp_train.DIGITS, seed=0, split="train")
    idx, targets = ddp_train.global_batch(train, 0, BATCH)
    _, want = gpt.loss_and_grads(idx, targets)  # one process, the whole batch

    assert sorted(want) == sorted(n[5:] for n in ranks[0].files if n.startswith("grad."))
    for name, g in want.items():
        for rank in ranks:
            got = rank[f"grad.{name}"]
            assert np.abs(got - g).max() <= 1e-6 * max(np.abs(g).max(), 1e-300), name
    for name in initial:
        assert np.array_equal(ranks[0][f"param.{name}"], ranks[1][f"param.{name}"]), name
    moved = [name for name, p in initial.items() if not np.array_equal(ranks[0][f"param.{name}"], p)]
    assert len(moved) == len(initial)  # AdamW (weight decay) moves every parameter
