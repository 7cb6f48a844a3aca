#!/usr/bin/python3
"""compare_outputs.py ACTUAL_DIR EXPECTED_DIR TOL NAME...

Compares each NAME.npy of ACTUAL_DIR with EXPECTED_DIR's: float outputs by
relative L2 error (||a - b|| / ||b|| <= TOL, NaN fails), integer and boolean
outputs (detection labels) exactly, shapes always exactly (a detector that
keeps one box more fails).  Prints one line with every output's result;
exit status 0 when all pass, 1 when one differs, 2 when a file is missing.
"""
import os
import sys

import numpy as np


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: compare_outputs.py ACTUAL_DIR EXPECTED_DIR TOL NAME...")
    actual, expected, tol, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    parts, ok = [], True
    for n in names:
        pa, pb = os.path.join(actual, n + ".npy"), os.path.join(expected, n + ".npy")
        if not os.path.exists(pa) or not os.path.exists(pb):
            print(f"{n}: missing {pa if not os.path.exists(pa) else pb}")
            return 2
        a, b = np.load(pa), np.load(pb)
        if a.shape != b.shape:
            parts.append(f"{n}: shape {a.shape} vs torch {b.shape}")
            ok = False
        elif b.dtype.kind in "iub":
            bad = int(np.count_nonzero(a != b))
            parts.append(f"{n}: {b.size} {b.dtype} " + ("exact" if not bad else f"{bad} differ"))
            ok &= bad == 0 and a.dtype.kind == b.dtype.kind
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            norm = np.linalg.norm(b64)
            err = np.linalg.norm(a64 - b64) / norm if norm > 0 else np.linalg.norm(a64)
            good = bool(np.isfinite(err) and err <= tol)
            parts.append(f"{n}: rel_l2 {err:.2e}" + ("" if good else f" > {tol:g}"))
            ok &= good
    print("; ".join(parts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
