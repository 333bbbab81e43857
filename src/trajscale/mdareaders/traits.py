"""The traits (:class:`~trajscale.formats.FormatTraits`) of the files read by MDAnalysis's reader for their format:
read by the format registry before it imports MDAnalysis."""

from __future__ import annotations

from ..formats import FormatTraits

#: The one-file formats MDAnalysis reads, DCD told by its first record (84, CORD); the others by extension,
#: through MDAnalysis's own table: the last asked. MDAnalysis's readers decode whole frames, in every format.
MDA_PART = FormatTraits(
    kind="mda_part", source="trajscale.mdareaders.part:MDAPartSource", formats=("DCD",), suffixes={".dcd": "DCD"},
    begins=(b"T\x00\x00\x00CORD", b"\x00\x00\x00TCORD"), precedence=100,
    frames_only={"DCD": "DCD", "NC": "NetCDF", "NCDF": "NetCDF", "TNG": "TNG", "MDCRD": "Amber", "TRJ": "Amber"},
    description=("CHARMM/NAMD/LAMMPS DCD, and every other format MDAnalysis reads (by its extension), "
                 "through MDAnalysis's reader for the file alone"),
    supports_parts=True, fills_rows=True, worker_modules=("MDAnalysis",), decoding={"*": "whole:MDAnalysis"})

#: A Universe over files (made by a caller with a topology, never matched to a file).
MDA = FormatTraits(kind="mda", source="trajscale.mdareaders.universe:MDASource", worker_modules=("MDAnalysis",),
                  decoding={"*": "whole:MDAnalysis"})

__all__ = ["MDA", "MDA_PART"]
