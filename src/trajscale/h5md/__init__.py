"""Everything H5MD: the schema, the layout plan, the writer, codecs, the read plan and its one chunk reader,
the HDF5 metadata of a file behind a URL, and ``inspect``.

A file is read by :class:`~.source.H5MDSource`: its metadata through HDF5 (HDF5's own driver for a local
file, a caching file object over the byte store for a URL: :mod:`.metadata`), and its frames by
:class:`~.chunks.ChunkReads`, which executes the read plan at the chunks' byte addresses against any
:class:`~trajscale.storage.bytestore.ByteStore`.
"""
