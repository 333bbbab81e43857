"""Everything XTC and TRR: the compiled decoder, the frame offsets index, the Source.

* :mod:`._xdr`: GROMACS's xdrfile compiled into trajscale (``csrc/``: its C, with its origin and licence
  note), every header field checked before a frame is decoded; a frame decoded as far as the last
  selected atom.
* :mod:`.offsets`: the offsets index: every frame's byte offset from one scan of the frames' headers (no
  coordinates decoded), shipped to workers in the Source's config; for bytes that are costly to read
  again (an object behind a URL), kept in trajscale's cache by the object's identity.
* :mod:`.source`: :class:`~.source.XDRSource`, which executes reads of frames against the file's
  :class:`~trajscale.storage.bytestore.ByteStore` (a local file or an object behind a URL alike), through
  the file the store offers the decoder (:func:`~trajscale.storage.files.as_file`).
* :mod:`.follow`: a growing file's whole frames, for ``run --follow``.
"""
