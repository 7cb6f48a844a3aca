#!/usr/bin/python3
"""compare_outputs.py ACTUAL_DIR EXPECTED_DIR TOL NAME...

Compares each NAME.npy of ACTUAL_DIR with EXPECTED_DIR's: float outputs by
relative L2 error (||a - b|| / ||b|| <= TOL, NaN fails), integer and boolean
outputs (detection labels) exactly, shapes always exactly (a detector that
keeps one box more fails).  Detection outputs (boxes, scores, labels
together): detections whose scores tie within TIE (1e-5 relative) may come
in either order, since the last bit of a score decides it; within each run
of tied scores of torch's, nn's detections are matched to torch's by label
and nearest box before the comparison (nothing else is forgiven: a box, a
score or a label that differs still fails).  Prints one line with every output's result;
exit status 0 when all pass, 1 when one differs, 2 when a file is missing.
"""
import os
import sys

import numpy as np


TIE = 1e-5


def untie(got, want):
    """got/want: {"boxes", "scores", "labels"} arrays; reorders got within runs of tied scores of want."""
    s, n = want["scores"], len(want["scores"])
    if len(got["scores"]) != n:
        return got
    order = np.arange(n)
    i = 0
    while i < n:
        j = i + 1
        while j < n and abs(float(s[j - 1]) - float(s[j])) <= TIE * max(abs(float(s[j - 1])), 1e-30):
            j += 1
        free = list(range(i, j))
        for k in range(i, j):
            cost = [(got["labels"][f] != want["labels"][k],
                     float(np.abs(got["boxes"][f] - want["boxes"][k]).sum()), f) for f in free]
            best = min(cost)[2]
            order[k] = best
            free.remove(best)
        i = j
    return {k: v[order] for k, v in got.items()}


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: compare_outputs.py ACTUAL_DIR EXPECTED_DIR TOL NAME...")
    actual, expected, tol, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    parts, ok = [], True
    loaded = {}
    for n in names:
        pa, pb = os.path.join(actual, n + ".npy"), os.path.join(expected, n + ".npy")
        if not os.path.exists(pa) or not os.path.exists(pb):
            print(f"{n}: missing {pa if not os.path.exists(pa) else pb}")
            return 2
        loaded[n] = (np.load(pa), np.load(pb))
    det = ("boxes", "scores", "labels")
    if all(k in loaded for k in det) and all(loaded[k][0].shape == loaded[k][1].shape for k in det):
        fixed = untie({k: loaded[k][0] for k in det}, {k: loaded[k][1] for k in det})
        for k in det:
            loaded[k] = (fixed[k], loaded[k][1])
    for n in names:
        a, b = loaded[n]
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
