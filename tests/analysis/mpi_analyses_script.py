"""Under mpiexec: every analysis case of one system on the MPI executor; rank 0 saves the results."""

from __future__ import annotations

import json
import sys
from dataclasses import fields, is_dataclass

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

import trajscale as ts  # noqa: E402
from tests.analysis.analyses_cases import SYSTEMS, cases  # noqa: E402


def main(system: str, h5md: str, out: str) -> int:
    saved, names = {}, []
    with ts.make_executor("mpi") as ex:
        for name, (analysis, _) in cases(system).items():
            r = ts.run(analysis, SYSTEMS[system][0], h5md, executor=ex, n_tasks=4)
            if r is None:
                continue
            names.append(name)
            keep = [f.name for f in fields(r) if isinstance(getattr(r, f.name), np.ndarray)] if is_dataclass(r) else []
            if hasattr(r, "name") and hasattr(r, "values"):
                keep.append(r.name)
            for f in keep:
                saved[f"{name}__{f}"] = np.asarray(getattr(r, f))
            saved[f"{name}__fields"] = json.dumps(keep)
    if names:
        np.savez(out, names=json.dumps(names), **saved)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
