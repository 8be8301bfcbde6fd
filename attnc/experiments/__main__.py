"""python -m attnc.experiments: list the experiments, one line each."""

from . import describe

if __name__ == "__main__":
    names = describe()
    width = max(map(len, names))
    print("python -m attnc.experiments.NAME --help: an experiment's flags\n")
    for name, line in names.items():
        print(f"  {name:<{width}}  {line}")
