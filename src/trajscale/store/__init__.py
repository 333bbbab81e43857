"""Moved: H5MD reading and writing is :mod:`trajscale.h5md`; units and box conversions are :mod:`trajscale.units`
and :mod:`trajscale.box`. The modules here only forward to their new homes."""
