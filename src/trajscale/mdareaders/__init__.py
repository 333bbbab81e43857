"""The formats trajscale reads through MDAnalysis's own readers (DCD, NetCDF, TNG, ...): one file through its
format's reader class (:mod:`.part`), a Universe over files (:mod:`.universe`), and their traits (:mod:`.traits`).
(:mod:`trajscale.mda` is the other way round: MDAnalysis reading trajscale's Sources.)"""
