"""Everything H5MD: the schema, the layout plan, the writer, codecs, the read plan and its one chunk reader, the
HDF5 metadata of a file behind a URL, and ``inspect``."""
