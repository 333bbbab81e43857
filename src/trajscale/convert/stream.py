"""Several trajectory files as one stream of blocks, joined as :func:`~trajscale.sources.chain.plan_join` decides.

Files whose times restart or repeat are renumbered so that steps and times keep increasing, as H5MD requires.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import numpy as np

from ..errors import AtomCountMismatchError, ConfigError
from ..sources import Source, registry
from ..sources.base import OpenRequest
from ..sources.chain import JoinPlan, plan_join
from ..storage.location import Location
from ..util import check_input_file, polling_for_stop, raise_if_stopped

log = logging.getLogger(__name__)

#: Bytes of input read per slab (and between progress records); TRAJSCALE_CONVERT_SLAB_MB overrides.
SLAB_BYTES = int(float(os.environ.get("TRAJSCALE_CONVERT_SLAB_MB", 64)) * 1024**2)


def open_input_file(path: str, group: str | None = None, assume_units: str | None = None,
                    offsets: str | None = None) -> Source:
    """The Source of one input file, as the format registry decides; no Universe, so MDAnalysis writes no
    offsets cache beside the user's files.  ``offsets``: XTC/TRR frame offsets scanned elsewhere (None: here).
    """
    return registry.open_part(Location(path), OpenRequest(group=group, assume_units=assume_units, offsets=offsets))


def open_inputs(topology: str, trajectories: list[str], n_atoms: int, group: str | None = None,
                assume_units: str | None = None, offsets: list | None = None) -> list[Source]:
    """One Source per input file, each checked against the topology's atom count ``n_atoms``."""
    sources: list[Source] = []
    try:
        for k, path in enumerate(trajectories):
            check_input_file(path)
            src = open_input_file(path, group, assume_units, offsets=offsets[k] if offsets else None)
            sources.append(src)
            if src.n_atoms != n_atoms:
                raise AtomCountMismatchError(
                    f"{path} has {src.n_atoms} atoms but the topology {topology} has {n_atoms}")
        if (group is not None or assume_units is not None) and not any(s.takes_h5md_options for s in sources):
            raise ConfigError(f"{trajectories[0]}: --group and --assume-units apply to H5MD inputs; "
                              "MDAnalysis reads these with their format's units")
    except BaseException:
        for s in sources:
            s.close()
        raise
    return sources


def frame_plan(lengths: list[int], start: int | None, stop: int | None, step: int | None):
    """Per file, the local frames (a ``range``) picked by a global ``start:stop:step``; and their total."""
    if step is not None and step < 1:
        raise ConfigError(f"--step must be a positive number of frames, got {step}")
    picked = range(sum(lengths))[slice(start, stop, step)]
    plans, offset = [], 0
    for n in lengths:   # the picked frames in [offset, offset + n), without listing them
        lo = max(0, -(-(offset - picked.start) // picked.step))
        hi = max(lo, -(-(offset + n - picked.start) // picked.step))
        sub = picked[lo:hi]
        plans.append(range(sub.start - offset, sub.stop - offset, sub.step))
        offset += n
    return plans, len(picked)


def iter_blocks(sources: list[Source], atoms: np.ndarray | None, fields: tuple[str, ...],
                start=None, stop=None, step=None, join: JoinPlan | None = None):
    """Yield the blocks of the joined (``join``, default :func:`plan_join`'s), sliced sources in order, in
    blocks of at most SLAB_BYTES of what the source allocates; step and time as the join shifts them."""
    join = join or plan_join(sources)
    plans, _ = frame_plan(join.lengths, start, stop, step)
    with polling_for_stop():
        for src, frames, (d_step, d_time) in zip(sources, plans, join.shifts, strict=False):
            if not len(frames):
                continue
            slab = max(1, SLAB_BYTES // src.bytes_per_frame(atoms, fields))
            for i in range(0, len(frames), slab):
                idx = frames[i:i + slab]
                raise_if_stopped()
                block = src.read(idx.start, idx[-1] + 1, atoms, fields, stride=frames.step)
                yield replace(block, step=block.step + d_step, time=block.time + d_time) if d_step or d_time \
                    else block
