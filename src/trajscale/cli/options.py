"""Options shared by the commands that open H5MD files: the particle group and stated units."""

from __future__ import annotations

from ..store.units import ASSUMABLE


def add_h5md_options(p, what: str = "the H5MD file") -> None:
    """``--group NAME`` and ``--assume-units {nm,Angstrom}`` (dests ``h5md_group``, ``assume_units``)."""
    p.add_argument("--group", dest="h5md_group", default=None, metavar="NAME",
                   help=f"particle group of {what} to read (needed when it has several; "
                        "`trajscale inspect FILE` lists them)")
    p.add_argument("--assume-units", default=None, choices=list(ASSUMABLE),
                   help=f"units of datasets in {what} that carry no unit attribute: nm (nm, ps, "
                        "kJ/(mol nm)) or Angstrom (A, ps, kJ/(mol A)); without it such a file is refused")
