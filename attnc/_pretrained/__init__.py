"""The trained models shipped with attnc: ``attnc.pretrained``.

Each ``NAME.npz`` here is an ``attnc.save`` file written by a full run of
its experiment (``python -m attnc.experiments.EXPERIMENT ... --save NAME.npz``);
``manifest.json`` records, for each, the experiment, the command, the seed,
the attnc version, the training time and the metric the run reported.
"""

from __future__ import annotations

import functools
import json
from typing import Any


@functools.cache
def _manifest() -> dict[str, dict[str, Any]]:
    from importlib import resources  # here, not at import: `import attnc` stays fast

    return json.loads(resources.files(__package__).joinpath("manifest.json").read_text(encoding="utf-8"))


def pretrained(name: str | None = None, *, info: bool = False) -> Any:
    """The trained models attnc ships: list them, or load one.

    ``attnc.pretrained()`` returns {name: one-line description} of every
    shipped model. ``attnc.pretrained(name)`` loads that model (with
    ``attnc.load``: float32, in eval mode); with ``info=True`` it returns
    (model, record), the record being the checkpoint's manifest entry: a dict
    with "experiment", "command" (the full run that trained it), "seed",
    "attnc_version", "train_seconds", "metric" (the name of the recorded
    measure), "value" (its value) and "metrics" (everything the run
    reported).

    Parameters
    ----------
    name : str or None, a name from ``attnc.pretrained()``
    info : bool, also return the checkpoint's manifest record

    Returns
    -------
    dict[str, str] without a name; the attnc.nn.Module (attnc.models
    class) with one; (module, dict) with ``info=True``

    Raises
    ------
    KeyError naming the unknown name and listing the known ones; TypeError
    when name is not a str.

    Example
    -------
    >>> "dates_bahdanau" in attnc.pretrained()
    True
    >>> model, record = attnc.pretrained("dates_bahdanau", info=True)
    >>> type(model).__name__, model.training, record["experiment"]
    ('Seq2Seq', False, 'dates')
    """
    entries = _manifest()
    if name is None:
        return {key: entry["description"] for key, entry in entries.items()}
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (one of attnc.pretrained()), got {type(name).__name__}")
    if name not in entries:
        raise KeyError(f"no pretrained model named {name!r}; the known ones are: {', '.join(entries)}")
    from importlib import resources

    import attnc
    import attnc.models  # (attnc.load rebuilds the model classes it has seen imported)

    with resources.as_file(resources.files(__package__).joinpath(f"{name}.npz")) as path:
        model = attnc.load(path)
    return (model, dict(entries[name])) if info else model
