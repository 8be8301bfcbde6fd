"""``python -m attnc``: a one-minute tour of attnc.

A one-minute tour: it trains the date translator of attnc.experiments.dates
(a recurrent encoder-decoder with Luong's "general" attention, 1,000 steps of
64 dates: under a minute on 2 cores, 100% exact match on the 2,000 held-out
dates), prints its accuracy and a few translations, and saves the alignment
matrix of one translation as a PNG (--out).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time

KIND = "luong-general"  # measured: 100% held-out in 1,000 steps, twice as fast as bahdanau's bidirectional encoder
STEPS = 1000
SHOWN = ("weekday_d_month_y", "the_dth_of_month_y", "mm/dd/yyyy", "d.m.yy", "yyyymmdd")  # formats translated
PLOTTED = "the_dth_of_month_y"  # the year comes last in the input and first in the output


def _experiments() -> str:
    """One line per experiment: its name and its docstring's first sentence."""
    from attnc.experiments import describe

    return "\n".join(f"  {name:20} {summary}" for name, summary in describe().items())


def _parser() -> argparse.ArgumentParser:
    epilog = (
        "experiments: python -m attnc.experiments.NAME [--quick] [--seed N] [--threads N] [--save PATH]\n"
        "(python -m attnc.experiments.NAME --help: its own flags)\n"
        + _experiments()
        + "\n\ntrained models: attnc.pretrained() lists them, attnc.pretrained(name) loads one."
    )
    parser = argparse.ArgumentParser(
        prog="python -m attnc",
        description=__doc__.strip().split("\n\n")[1],
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="attnc_tour_alignment.png", help="where to save the alignment heatmap (PNG)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights")
    parser.add_argument("--threads", type=int, default=None, help="attnc.set_num_threads(N) (default: every core)")
    parser.add_argument(
        "--quick", action="store_true", help="a few seconds of training (for CI): the translations will mostly be wrong"
    )
    return parser


def _train(args, folder: str):
    """Train with the experiment itself (its run folder in `folder`); (its metrics, the trained model)."""
    import attnc.experiments

    with contextlib.redirect_stdout(io.StringIO()):  # the experiment's JSON line; its progress bar stays on stderr
        result = attnc.experiments.run(
            "dates",
            attention=KIND,
            seed=args.seed,
            quick=args.quick,
            steps=None if args.quick else STEPS,
            threads=args.threads,
            run_dir=os.path.join(folder, "run"),
        )
    assert result.model is not None  # one attention kind: one model
    return result.metrics, result.model.eval()


def _translate(model, texts):
    """(the model's ISO dates, their alignment matrices (B, 11, S), output token ids per row)."""
    from attnc.datasets.dates import SOURCE_VOCAB, TARGET_LEN, TARGET_VOCAB

    src = SOURCE_VOCAB.pad_batch(texts, length=max(map(len, texts)))
    tokens, align = model.generate(
        src.ids, src.lengths, max_len=TARGET_LEN + 1, bos=TARGET_VOCAB.bos, eos=TARGET_VOCAB.eos
    )
    ids = [row[: row.index(TARGET_VOCAB.eos) + 1] if TARGET_VOCAB.eos in row else row for row in tokens.tolist()]
    return [TARGET_VOCAB.decode(r) for r in ids], align, ids


def _save_heatmap(path: str, text: str, align, ids) -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    import attnc.plot
    from attnc.datasets.dates import TARGET_VOCAB

    source = [c if c != " " else "·" for c in text]  # a space would leave its tick blank
    ax = attnc.plot.alignment(
        align[: len(ids), : len(text)],
        source,
        [TARGET_VOCAB.tokens[t] for t in ids],
        title=f"{text!r} → {TARGET_VOCAB.decode(ids)}\nrow: the character written; column: where the decoder looked",
    )
    fig = ax.get_figure(root=True)
    assert fig is not None  # the plot drew on a figure of its own
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    start = time.perf_counter()
    import attnc
    from attnc.datasets import dates as make_dates
    from attnc.datasets import format_date
    from attnc.datasets.dates import FORMATS

    print(
        f"attnc {attnc.__version__}: training a date translator ({KIND} attention, "
        f"{'a few' if args.quick else f'{STEPS:,}'} steps of dates such as 'sunday 22 november 2026' "
        f"→ '2026-11-22') on {args.threads or attnc.get_num_threads()} thread(s)...",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="attnc_tour_") as folder:
        metrics, model = _train(args, folder)
    print(
        f"held-out exact match: {metrics['exact_match']:.1%} of {metrics['heldout_size']:,} dates never seen in "
        f"training (trained in {metrics['train_seconds']:.0f} s)"
    )

    day = make_dates(1, seed=args.seed + 1, split="test", split_by="date").dates[0].item()
    texts = [format_date(day, f) for f in SHOWN]
    outputs, align, ids = _translate(model, texts)
    for text, iso in zip(texts, outputs):
        print(f"  {text!r:32} → {iso}  {'✓' if iso == str(day) else '✗ (expected ' + str(day) + ')'}")
    k = SHOWN.index(PLOTTED)
    _save_heatmap(args.out, texts[k], align[k], ids[k])
    print(f"alignment heatmap of {texts[k]!r}: {os.path.abspath(args.out)}")
    print(
        f"tour done in {time.perf_counter() - start:.0f} s; {len(FORMATS)} input formats in all. "
        "Next: python -m attnc --help lists the experiments, attnc.pretrained() the trained models."
    )


if __name__ == "__main__":
    main()
