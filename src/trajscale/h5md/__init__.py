"""Everything H5MD: the schema, the layout plan, the writer, codecs, the read plan and its one chunk reader,
the HDF5 metadata of a file behind a URL, and ``inspect``.

A file is read by :class:`~.source.H5MDSource`: its metadata through HDF5, its frames by
:class:`~.chunks.ChunkReads` at the chunks' byte addresses against any byte store.
"""
