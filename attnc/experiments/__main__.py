"""python -m attnc.experiments: list the experiments, one line each;
python -m attnc.experiments sweep NAME ...: run a sweep (attnc.experiments.sweep)."""

import sys

from . import _sweep, describe

if __name__ == "__main__":
    if sys.argv[1:2] == ["sweep"]:
        sys.exit(_sweep.main(sys.argv[2:]))
    names = describe()
    width = max(map(len, names))
    print("python -m attnc.experiments.NAME --help: an experiment's flags")
    print("python -m attnc.experiments sweep --help: run one over seeds and a grid of its flags\n")
    for name, line in names.items():
        print(f"  {name:<{width}}  {line}")
