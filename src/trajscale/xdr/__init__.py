"""Everything XTC and TRR: the compiled decoder, the frame offsets index, the Source.

* :mod:`._xdr`: GROMACS's xdrfile compiled in (``csrc/``, with its origin and licence note), every header field
  checked before a frame is decoded, as far as the last selected atom.
* :mod:`.offsets`: every frame's byte offset from one scan of the headers, shipped to workers; for an object
  behind a URL, kept in trajscale's cache by its identity.
* :mod:`.source`: :class:`~.source.XDRSource`, reading frames from the file's byte store, local or remote alike.
* :mod:`.follow`: a growing file's whole frames, for ``run --follow``.
"""
