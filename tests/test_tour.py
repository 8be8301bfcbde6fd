"""``python -m attnc``, the tour: it trains, prints an accuracy and translations
that are marked right exactly when they are, saves a PNG heatmap, and
``--help`` lists every experiment with its description."""

import datetime
import importlib
import os
import re
import subprocess
import sys

import numpy as np

from attnc.experiments import EXPERIMENTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tour(*args):
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "attnc", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr


def test_quick_tour_prints_accuracy_translations_and_saves_the_heatmap(tmp_path):
    out = tmp_path / "align.png"
    stdout, stderr = tour("--quick", "--seed", "2", "--threads", "1", "--out", str(out))
    assert "it/s" in stderr or "s/it" in stderr  # the experiment's progress bar
    accuracy = re.search(r"held-out exact match: ([\d.]+)% of ([\d,]+) dates", stdout)
    assert accuracy and 0 <= float(accuracy.group(1)) <= 100 and int(accuracy.group(2).replace(",", "")) > 0

    lines = re.findall(r"^  '(.+?)' +→ (\S+)  (✓|✗ \(expected (\S+)\))$", stdout, re.MULTILINE)
    assert len(lines) == 5, stdout
    expected = {m[3] for m in lines if m[3]} or {m[1] for m in lines}
    assert len(expected) == 1  # one date, written in five formats
    day = datetime.date.fromisoformat(expected.pop())
    for source, output, mark, _ in lines:
        assert (mark == "✓") == (output == day.isoformat())
        assert str(day.day) in source and str(day.year)[-2:] in source

    assert str(out) in stdout
    import matplotlib.image

    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(out)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 500
    assert np.ptp(pixels[..., :3]) > 0.5  # a picture, not a blank page


def test_help_lists_every_experiment_with_its_description():
    stdout, _ = tour("--help")
    for flag in ("--out", "--seed", "--threads", "--quick"):
        assert flag in stdout
    for name in EXPERIMENTS:
        first_line = importlib.import_module(f"attnc.experiments.{name}").__doc__.strip().splitlines()[0]
        assert re.search(rf"^  {name} +{re.escape(first_line)}", stdout, re.MULTILINE), name
    assert "python -m attnc.experiments.NAME" in stdout and "trains the date translator" in stdout
