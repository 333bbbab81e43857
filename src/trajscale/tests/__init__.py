"""Tests shipped with the package: ``pytest --pyargs trajscale`` (needs pytest and MDAnalysisTests).

A self-contained subset of the project's suite, for checking an installed trajscale (the MDAKits
registry runs it weekly against MDAnalysis's releases): conversions, analyses against MDAnalysis's
own classes on serial and process executors, the TRAJSCALE reader and writer.
"""
