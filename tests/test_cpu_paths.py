"""Every SIMD path this machine runs gives the same results.

attnc's C core is built once per SIMD path (baseline, avx2, avx512) and
attnc loads the best the CPU runs; ATTNC_CPU forces one. The rest of the
suite runs on the default path. Here, for every other path the CPU runs:
- the kernel tests (each against its NumPy float64, torch and finite-
  difference references) run again in a process with ATTNC_CPU set;
- the thread-count tests run again on every path under each other OpenBLAS
  kernel the CPU runs (OPENBLAS_CORETYPE);
- a battery of forward and backward calls over every family of kernels runs
  on each path, and the outputs are compared across paths: bitwise equal,
  except where the AVX2 and AVX-512 builds run their own float32 kernels
  with fused multiply-adds, which are compared within 1e-5: recurrent
  networks (LSTM, GRU and the pointer network that runs on them: the fused
  time loop of rnn/rnn_fast.c), scaled-dot-product attention (with the
  transformer layer that runs on it: the tile products of
  core/tile_gemm.c and, in AVX-512, core/rows_f32.h's exp) and, in
  AVX-512, the additive score's factored tanh (attention/score_impl.h).

Run as a script (``ATTNC_CPU=avx2 python tests/test_cpu_paths.py out.npz``)
it writes the battery's outputs on the path in force.
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnc
import attnc.datasets
import attnc.models
from attnc import _dispatch

HERE = Path(__file__).resolve().parent

# The tests of the C kernels (and of the modules and models built on them),
# rerun on every other path; the rest run no C arithmetic of their own or
# only repeat it at length (experiments, benchmarks, notebooks).
OTHER_TESTS = [
    "test_benchmarks_smoke.py",
    "test_torch_variants.py",
    "test_torch_masks.py",
    "test_torch_layer_masks.py",
    "test_mha_variants.py",
    "test_c_core.py",
    "test_cpu_paths.py",
    "test_datasets.py",
    "test_mqar.py",
    "test_markov.py",
    "test_translation.py",
    "test_captions_compare.py",  # captions --compare: the Captioner's arithmetic is test_captioner's
    "test_seq2seq_experiments.py",  # bahdanau_length, luong_comparison: the models' arithmetic is test_seq2seq_rnn's
    "test_docs.py",
    "test_experiments.py",
    "test_modern_experiments.py",
    "test_install.py",
    "test_layout.py",
    "test_load.py",
    "test_ntm_datasets.py",
    "test_ntm_generalisation.py",
    "test_plot.py",
    "test_pointer_datasets.py",
    "test_torch_fused.py",
    "test_sagan_shapes.py",
    "test_sizes.py",
    "test_text_tasks.py",
    "test_typing.py",
    "test_vjp_unchanged.py",
    "test_golden.py",
    "test_binding_structs.py",
    "test_optim_state.py",
    "test_experiment_runs.py",
    "test_sweep.py",
    "test_docs_pages.py",
    "test_packaging.py",
    "test_module_print.py",
    "test_lint.py",
    "test_tour.py",
    "test_pretrained.py",
    "test_torch_wrap.py",
    "test_tensor_inputs.py",
    "test_ddp.py",
    "test_torch_ops.py",
    "test_viz.py",
    "test_viz_jupyter.py",  # the widget in a JupyterLab served here
    "test_viz_browser.py",  # attnc.viz's pages in chromium: no C arithmetic of their own
    "test_hf_models.py",  # loading Hugging Face checkpoints: the layers' arithmetic is test_transformer's
    "test_viz_static.py",  # attnc.viz's matplotlib form: draws what the views ship
    "test_binding.py",  # the binding's surface against its table (the sources): every path compiles the same ops.c
]
KERNEL_TESTS = [
    "test_models.py",
    "test_layer_variants.py",
    "test_layer_masks.py",
    "test_errors.py",
    "test_nn_module.py",
    "test_optim.py",
    "test_fewshot.py",
    "test_attention.py",
    "test_score.py",
    "test_softmax.py",
    "test_sdpa.py",
    "test_sdpa_variants.py",
    "test_sdpa_masks.py",
    "test_mha_masks.py",
    "test_multihead.py",
    "test_kv_cache.py",
    "test_hard_local.py",
    "test_kernel_regression.py",
    "test_linear_attention.py",
    "test_nn_layers.py",
    "test_conv.py",
    "test_rnn.py",
    "test_lstmn.py",
    "test_attention_pooling.py",
    "test_attribution.py",
    "test_self_attention2d.py",
    "test_transformer.py",
    "test_decode.py",
    "test_ntm.py",
    "test_ntm_model.py",
    "test_pointer_model.py",
    "test_seq2seq_rnn.py",
    "test_captioner.py",
    "test_snail.py",
    "test_decomposable.py",
    "test_properties.py",
    "test_torch_opinfo.py",
    "test_empty.py",
    "test_strides.py",
    "test_rotary.py",
    "test_modern_attention.py",
]

DEFAULT = attnc._core.simd_path()
# float32 outputs allowed to differ
FUSED_F32 = ("LSTM ", "GRU ", "pointer ", "sdpa ", "transformer layer", "additive ")
OTHERS = [p for p in _dispatch.supported_paths() if p != DEFAULT]


def battery() -> dict:
    """name -> output of a forward or backward call, for every kernel family."""
    out = {}
    rng = np.random.default_rng(0)

    def arr(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    for dt in (np.float32, np.float64):
        tag = np.dtype(dt).name
        q, k, v = arr(2, 3, 37, 24, dtype=dt), arr(2, 3, 45, 24, dtype=dt), arr(2, 3, 45, 24, dtype=dt)
        for causal in (False, True):
            (o, w), pull = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, is_causal=causal, return_weights=True)
            out[f"sdpa causal={causal} {tag}"] = o
            out[f"sdpa weights causal={causal} {tag}"] = w
            for name, g in pull(np.ones_like(o), None).items():
                out[f"sdpa grad {name} causal={causal} {tag}"] = g
        out[f"sdpa dropout {tag}"] = attnc.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5)
        qa, ka = arr(3, 7, 16, dtype=dt), arr(3, 9, 16, dtype=dt)
        params = dict(w_query=arr(16, 12, dtype=dt), w_key=arr(16, 12, dtype=dt), v=arr(12, dtype=dt))
        (ctx, w), pull = attnc.vjp(attnc.attention, qa, ka, score="additive", **params)
        out[f"additive context {tag}"] = ctx
        for name, g in pull(np.ones_like(ctx), None).items():
            out[f"additive grad {name} {tag}"] = g
        proj = attnc.performer_projection(20, 24, seed=0, dtype=dt)
        for fmap, causal in (("elu", False), ("favor+", True)):
            kw = dict(feature_map=fmap, causal=causal, projection=proj if fmap == "favor+" else None)
            o, pull = attnc.vjp(attnc.linear_attention, q, k[:, :, :37], v[:, :, :37], **kw)
            out[f"linear attention {fmap} {tag}"] = o
            for name, g in pull(np.ones_like(o)).items():
                out[f"linear attention grad {name} {fmap} {tag}"] = g
        x = arr(4, 11, 40, dtype=dt)
        out[f"softmax {tag}"] = attnc.softmax(x, causal=True)
        out[f"log_softmax {tag}"] = attnc.nn.log_softmax(x)
        for name, mod, xin in [
            ("LSTM 32", attnc.nn.LSTM(40, 32, batch_first=True, dtype=dt, seed=1), x),
            ("LSTM 24", attnc.nn.LSTM(40, 24, batch_first=True, dtype=dt, seed=1), x),  # AVX2-width kernel
            ("GRU 32", attnc.nn.GRU(40, 32, batch_first=True, dtype=dt, seed=1), x),
        ]:
            (y, _), pull = attnc.vjp(mod, xin)
            out[f"{name} {tag}"] = y
            for g_name, g in pull(np.ones_like(y), None).items():
                out[f"{name} grad {g_name} {tag}"] = g
        for name, mod, xin in [
            (
                "transformer layer",
                attnc.nn.TransformerEncoderLayer(40, 4, 64, dropout=0.0, batch_first=True, dtype=dt, seed=2),
                x,
            ),
            ("conv2d", attnc.nn.Conv2d(3, 5, 3, padding=1, dtype=dt, seed=3), arr(2, 3, 9, 10, dtype=dt)),
            ("LSTMN", attnc.nn.LSTMN(40, 16, dtype=dt, seed=4), x),
            ("attention pooling", attnc.nn.AttentionPooling(40, 8, dtype=dt, seed=5), x),
            ("self-attention 2d", attnc.nn.SelfAttention2d(16, dtype=dt, seed=6), arr(2, 16, 5, 6, dtype=dt)),
        ]:
            y, pull = attnc.vjp(mod, xin)
            y0 = y[0] if isinstance(y, tuple) else y
            out[f"{name} {tag}"] = y0
            grads = pull(np.ones_like(y0)) if not isinstance(y, tuple) else pull(np.ones_like(y0), None)
            for g_name, g in grads.items():
                out[f"{name} grad {g_name} {tag}"] = g
        pointer = attnc.models.PointerNet(2, 16, dtype=dt, seed=7)
        batch = attnc.datasets.TSPTask(6).batch(8, seed=8)
        batch = dataclasses.replace(batch, inputs=batch.inputs.astype(dt))
        loss, grads = pointer.loss_and_grads(batch)
        out[f"pointer loss {tag}"] = np.array(loss)
        for g_name, g in grads.items():
            out[f"pointer grad {g_name} {tag}"] = g
    return out


def test_every_test_file_is_classified():
    """A new test file must say whether it tests kernels (and so reruns on every path)."""
    files = sorted(p.name for p in HERE.glob("test_*.py"))
    assert sorted(KERNEL_TESTS + OTHER_TESTS) == files


@pytest.mark.parametrize("path", OTHERS)
def test_kernel_tests_pass_on_every_path(path):
    env = dict(os.environ, ATTNC_CPU=path)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        *[str(HERE / f) for f in KERNEL_TESTS],
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(HERE))
    assert run.returncode == 0, f"ATTNC_CPU={path}:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"


def test_paths_agree(tmp_path):
    results = {DEFAULT: battery()}
    for path in OTHERS:
        file = tmp_path / f"{path}.npz"
        run = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), str(file)],
            env=dict(os.environ, ATTNC_CPU=path),
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        with np.load(file) as f:
            results[path] = {name: f[name] for name in f.files}
    assert len(results[DEFAULT]) > 100
    for path in OTHERS:
        assert results[path].keys() == results[DEFAULT].keys()
        for name, ref in results[DEFAULT].items():
            got = results[path][name]
            if name.startswith(FUSED_F32) and name.endswith("float32"):
                np.testing.assert_allclose(
                    got,
                    ref,
                    rtol=1e-5,
                    atol=1e-5 * max(1.0, float(np.abs(ref).max())),
                    err_msg=f"{name}: {path} vs {DEFAULT}",
                )
            else:
                np.testing.assert_array_equal(got, ref, err_msg=f"{name}: {path} vs {DEFAULT}")


def test_the_loaded_path_is_the_best_the_cpu_runs_unless_forced():
    supported = _dispatch.supported_paths()
    assert supported[0] == "baseline"
    forced = os.environ.get("ATTNC_CPU")
    assert DEFAULT == (forced or supported[-1])
    info = attnc.show_config(mode="dicts")
    assert info["simd"]["path"] == DEFAULT and info["blas"]["threads"] == 1


# OpenBLAS kernels (OPENBLAS_CORETYPE) the thread-count tests rerun under,
# with the SIMD path a CPU needs to run each: forcing a kernel the CPU cannot
# run dies of an illegal instruction. Their blocking differs, and with it how
# a product's rounding depends on its shape: results must not depend on the
# thread count under any of them.
# (SSE4.2 for Nehalem's, AVX for Sandybridge's: any x86-64-v3 CPU has both.)
CORETYPES = {"Nehalem": "avx2", "Sandybridge": "avx2", "Haswell": "avx2", "Zen": "avx2", "SkylakeX": "avx512"}


def blas_core(coretype: str | None = None) -> str:
    """The kernel the bundled OpenBLAS picks with OPENBLAS_CORETYPE=coretype
    (None: as the environment has it), as its config names it."""
    env = dict(os.environ, **({"OPENBLAS_CORETYPE": coretype} if coretype else {}))
    run = subprocess.run(
        [sys.executable, "-c", "import attnc; print(attnc.blas_info())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.split("NO_AFFINITY")[-1].split()[0]


def other_kernels() -> dict:
    """coretype -> kernel, for the kernels this CPU runs other than the one in
    force (the rest of the suite runs under that one), each kernel once (this
    OpenBLAS serves Zen with Haswell's kernels)."""
    cpu = attnc._core.cpu_paths().split()
    default = blas_core()
    kernels = {}
    for coretype, needs in CORETYPES.items():
        kernel = blas_core(coretype) if needs in cpu else default
        if kernel != default and kernel not in kernels.values():
            kernels[coretype] = kernel
    return kernels


KERNELS = other_kernels()


def test_the_thread_tests_rerun_under_another_openblas_kernel():
    """On any x86-64-v3 CPU at least Nehalem's kernels differ from the one in force."""
    assert KERNELS or "avx2" not in attnc._core.cpu_paths().split()


@pytest.mark.parametrize("coretype", KERNELS)
@pytest.mark.parametrize("path", _dispatch.supported_paths())
def test_thread_tests_pass_under_every_openblas_kernel(path, coretype):
    """Every test marked ``threads`` (tests/conftest.py) on every SIMD path,
    with OpenBLAS forced to each other kernel this CPU runs."""
    env = dict(os.environ, ATTNC_CPU=path, OPENBLAS_CORETYPE=coretype)
    files = [str(p) for p in sorted(HERE.glob("test_*.py")) if "restore_threads" in p.read_text()]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-m",
        "threads",
        *files,
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(HERE))
    where = f"ATTNC_CPU={path} OPENBLAS_CORETYPE={coretype}"
    assert run.returncode == 0, f"{where}:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    assert " passed" in run.stdout and " deselected" in run.stdout, run.stdout[-2000:]


@pytest.mark.parametrize("value,error", [("sse9", "is not a SIMD path"), ("AVX-512", "is not a SIMD path")])
def test_a_bad_attnc_cpu_is_a_clear_error(value, error):
    run = subprocess.run(
        [sys.executable, "-c", "import attnc"], env=dict(os.environ, ATTNC_CPU=value), capture_output=True, text=True
    )
    assert run.returncode != 0 and error in run.stderr and "ATTNC_CPU" in run.stderr


if __name__ == "__main__":
    np.savez(sys.argv[1], **battery())
