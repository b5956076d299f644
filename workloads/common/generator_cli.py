"""The command line the data set generators share (workloads/*/make_*.py,
workloads/wmt/tools/generate_wmt.py, bench/make_*_scale.py): the module's
docstring as --help, where to write (OUT), and the numbers that size and
seed the set.

Import it by path: sys.path.insert(0, <repo>/workloads/common).
"""

import argparse


def parser(doc, out="out", **numbers):
    """An ArgumentParser for a generator whose docstring is `doc` (shown by
    --help as written): `out` is where it writes (args.out), a positional
    argument, or a required option when it starts with "--"; then each of
    `numbers`, in the order given, an option --<name, "-" for "_"> of its
    default's type (int or float) and that default. The caller adds the
    rest."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawTextHelpFormatter)
    if out.startswith("--"):
        ap.add_argument(out, required=True)
    else:
        ap.add_argument(out)
    for name, default in numbers.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default),
                        default=default)
    return ap
