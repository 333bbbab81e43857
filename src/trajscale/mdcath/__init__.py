"""mdCATH's per-domain HDF5 files: the Source (:mod:`.source`), the file's layout (:mod:`.layout`), its
labelled atoms (:mod:`.atoms`) and its traits (:mod:`.traits`), read over :mod:`trajscale.hdf5`."""
