"""tests/py/harness.py -- the start every Python oracle test shares: parse its options, point
the kiln package at the build's libkiln, print the seed (fresh unless --seed is given), and
check that Debian's Python has the packages the test needs."""

import importlib
import os
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(ap, modules):
    """Parses ``ap`` (which must define --kiln and --seed), sets KILN_LIB from --kiln, moves
    into the repository and prints the seed. Returns ``(opt, kiln_bin, seed)``, or None after
    printing why the test is skipped when one of ``modules`` cannot be imported."""
    opt = ap.parse_args()
    kiln_bin = os.path.abspath(opt.kiln)
    os.chdir(REPO)
    if not os.environ.get("KILN_LIB"):
        os.environ["KILN_LIB"] = os.path.join(os.path.dirname(kiln_bin), "libkiln.so")
    seed = opt.seed if opt.seed is not None else int(time.time()) % 100000
    print("seed %d" % seed)
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            print("skip: %s (use Debian's /usr/bin/python3 with %s)" % (e, ", ".join(modules)))
            return None
    return opt, kiln_bin, seed


FAILS = []  # messages of the failed checks of this test process


def check(cond, msg):
    """Records (and prints) a failed check without stopping the test; returns cond."""
    if not cond:
        FAILS.append(msg)
        print("FAIL " + msg)
    return cond
