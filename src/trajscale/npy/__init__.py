"""NumPy's ``.npy`` coordinate stacks: the Source (:mod:`.source`) and its traits (:mod:`.traits`)."""
