"""HDF5 over a byte store: open a file by its store, its superblock, metadata prefetch, chunk index and reads.

Generic to any HDF5 file; the H5MD format (:mod:`trajscale.h5md`) and the mdCATH reader both stand on it.
"""
