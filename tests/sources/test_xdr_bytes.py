"""The offsets scan over a file-like object (a remote byte store's) is the scan over a path: the same
offsets, steps, times and fields, or the same error, for MDAnalysisTests' XTC and TRR files and their
damaged variants (every header word of the first two frames set to hostile values, the damage seen in
the wild, the file cut every few bytes). A path's TRR scan is xdrfile's own ``do_trnheader``; over bytes,
each header is parsed as it parses it, so this compares two implementations of its checks.
"""

from __future__ import annotations

import io

import pytest
from trajscale.xdr._xdr import XDRFormatError, scan_trr, scan_xtc

from .test_xdr_corruption import (
    TRR10,
    XTC10,
    _field_variants,
    _frame_offsets,
    _named_trr_variants,
    _named_xtc_variants,
)


def outcome(scan, src, partial: bool) -> str:
    """What a scan gives, as comparable text (NaN times compare equal as text)."""
    dropped = [] if partial else None
    try:
        n, offsets, fields, steps, times = scan(src, partial_last=dropped)
        return repr(("ok", n, offsets.tolist(), fields, steps.tolist(), times.tolist(), dropped))
    except XDRFormatError as exc:
        return repr(("error", str(exc), exc.n_atoms, exc.offsets.tolist(), exc.steps.tolist(), exc.times.tolist(),
                     exc.fields, exc.complete_bytes))


def variants(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    offsets = _frame_offsets(path)
    out = {"whole": data, **_field_variants("v", data, offsets, 120)}
    out.update(_named_trr_variants("v", data) if path.endswith(".trr") else _named_xtc_variants("v", data, offsets))
    out.update({f"cut{k}": data[:k] for k in range(0, min(len(data), offsets[2] + 200), 7)})
    return out


@pytest.mark.parametrize("path", [TRR10, XTC10])
def test_file_like_scan_is_the_path_scan(tmp_path, path):
    scan = scan_trr if path.endswith(".trr") else scan_xtc
    on_disk = tmp_path / ("v" + path[-4:])
    compared = 0
    for name, data in variants(path).items():
        on_disk.write_bytes(data)
        for partial in (False, True):
            assert outcome(scan, str(on_disk), partial) == outcome(scan, io.BytesIO(data), partial), name
            compared += 1
    assert compared > 500
