"""Everything XTC and TRR: GROMACS's xdrfile compiled in (``csrc/``, with its origin and licence note), the frame
offsets index, the Source, and a growing file's whole frames."""
