"""Each analysis on each MDAnalysisTests system, with MDAnalysis's own answer as the reference.

A system's reference answers are computed once per process, however many tests (serial, on H5MD and on
MDAnalysis's formats, on each executor) compare with them: each was a full MDAnalysis analysis of the
system (AdK in water: 47,681 atoms), computed again for every test that asked.
"""

from __future__ import annotations

import functools
import warnings

import MDAnalysis as mda
import numpy as np
from MDAnalysis.analysis import align, contacts, rdf, rms
from MDAnalysis.lib.distances import calc_bonds, distance_array
from MDAnalysisTests import datafiles as D

import trajscale as ts

warnings.filterwarnings("ignore", module="MDAnalysis")

#: name -> (topology, trajectory)
SYSTEMS = {
    "adk_psf_dcd": (D.PSF, D.DCD),                        # no box, 98 frames
    "adk_water_gro_xtc": (D.GRO, D.XTC),                  # triclinic (dodecahedron) box, 47,681 atoms
    "triclinic_dcd": (D.PSF_TRICLINIC, D.DCD_TRICLINIC),  # general triclinic box, water
}
SEL = {"adk_psf_dcd": ("name CA", "backbone"), "adk_water_gro_xtc": ("name CA", "backbone"),
       "triclinic_dcd": ("name OH2", "all")}
PAIR = {"adk_psf_dcd": ("name CA and resid 1-60", "name CA and resid 100-200"),
        "adk_water_gro_xtc": ("name CA and resid 1-60", "name CA and resid 100-200"),
        "triclinic_dcd": ("name OH2 and index 0:150", "name OH2 and index 180:374")}


def universe(system):
    return mda.Universe(*SYSTEMS[system])


@functools.cache
def _shared(system):
    """The Universe the references read (and do not change): one per system and process."""
    return universe(system)


class _Fields:
    """Stands for a result in a reference function: reading an attribute gives its name."""

    def __getattr__(self, name: str) -> str:
        return name


#: (system, analysis) -> [(the result's field, MDAnalysis's answer, tolerance)]
_REFERENCES: dict[tuple[str, str], list] = {}


def _remembered(key: tuple[str, str], reference_fn):
    """``reference_fn`` computed once for ``key``; each call pairs its answers with the result's fields."""
    def reference(result) -> list:
        if key not in _REFERENCES:
            _REFERENCES[key] = reference_fn(_Fields())
        return [(getattr(result, field), ref, tol) for field, ref, tol in _REFERENCES[key]]
    return reference


def case_names(system) -> list[str]:
    """The names :func:`cases` gives ``system``, without its Universe: test parameters are listed at collection,
    by every pytest worker (AdK in water's 47,681 atoms took a second a worker)."""
    names = ["rmsf", "rmsf_fit", "rgyr", "average", "distance_array", "pair_distances", "com_distance",
             "contacts_hard_cut", "contacts_radius_cut"]
    return names + (["rdf", "rdf_density"] if system != "adk_psf_dcd" else [])


def cases(system):
    """name -> (trajscale analysis, function(result) -> [(ours, reference, tolerance)]).

    Each call gives new analyses; MDAnalysis's answers are computed at their first use in this process."""
    sel, fit = SEL[system]
    a, b = PAIR[system]
    u = _shared(system)
    out = {}
    pbc = system != "adk_psf_dcd"   # minimum image needs a box in every frame; this system has none

    def rmsf_ref(r):
        return [(r.rmsf, rms.RMSF(u.select_atoms(sel)).run().results.rmsf, 1e-5)]
    out["rmsf"] = (ts.RMSF(select=sel), rmsf_ref)

    def rmsf_fit_ref(r):
        mob, ref = universe(system), universe(system)
        ref.trajectory[0]
        align.AlignTraj(mob, ref, select=fit, in_memory=True).run()
        return [(r.rmsf, rms.RMSF(mob.select_atoms(sel)).run().results.rmsf, 1e-4)]
    out["rmsf_fit"] = (ts.RMSF(select=sel, fit_select=fit), rmsf_fit_ref)

    def rgyr_ref(r):
        g = u.select_atoms(sel)
        return [(r.rgyr, np.array([g.radius_of_gyration() for _ in u.trajectory]), 1e-5)]
    out["rgyr"] = (ts.RadiusOfGyration(select=sel), rgyr_ref)

    def avg_ref(r):
        mob = universe(system)
        return [(r.positions, align.AverageStructure(mob, select=sel, ref_frame=0).run().results.positions, 1e-4)]
    out["average"] = (ts.AverageStructure(select=sel), avg_ref)

    def dist_ref(r):
        ga, gb = u.select_atoms(a), u.select_atoms(b)
        ref = np.array([distance_array(ga.positions, gb.positions, box=t.dimensions) for t in u.trajectory])
        return [(r.distances, ref, 1e-4)]
    out["distance_array"] = (ts.Distances(a, b, pbc=pbc), dist_ref)

    def bonds_ref(r):
        ga, gb = u.select_atoms(a), u.select_atoms(b)
        n = min(ga.n_atoms, gb.n_atoms)
        ref = np.array([calc_bonds(ga.positions[:n], gb.positions[:n], box=t.dimensions) for t in u.trajectory])
        return [(r.distances, ref, 1e-4)]
    ga, gb = u.select_atoms(a), u.select_atoms(b)
    n = min(ga.n_atoms, gb.n_atoms)
    idx = lambda g: "index " + " ".join(map(str, g.indices[:n]))  # noqa: E731
    out["pair_distances"] = (ts.Distances(idx(ga), idx(gb), pbc=pbc), bonds_ref)

    def com_ref(r):
        ga, gb = u.select_atoms(a), u.select_atoms(b)
        ref = np.array([calc_bonds(ga.center_of_mass(), gb.center_of_mass(), box=t.dimensions if pbc else None)
                        for t in u.trajectory])
        return [(r.distance, ref, 1e-5)]
    out["com_distance"] = (ts.analysis.CentreOfMassDistance(a, b, pbc=pbc), com_ref)

    for method in ("hard_cut", "radius_cut"):
        def contacts_ref(r, method=method):
            ga, gb = u.select_atoms(a), u.select_atoms(b)
            c = contacts.Contacts(u, select=(a, b), refgroup=(ga, gb), radius=8.0, method=method).run()
            return [(r.timeseries, c.results.timeseries, 1e-12)]
        out[f"contacts_{method}"] = (ts.Contacts(select=(a, b), radius=8.0, method=method, pbc=pbc), contacts_ref)

    if system != "adk_psf_dcd":   # an RDF needs a box
        def rdf_ref(r):
            g = u.select_atoms(sel)
            x = rdf.InterRDF(g, g, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)).run()
            return [(r.count, x.results.count, 0.0), (r.rdf, x.results.rdf, 1e-5), (r.bins, x.results.bins, 1e-12)]
        out["rdf"] = (ts.RDF(sel, sel, nbins=40, range=(0.0, 8.0), exclusion_block=(1, 1)), rdf_ref)

        def rdf_density_ref(r):
            g1, g2 = u.select_atoms(a), u.select_atoms(sel)
            x = rdf.InterRDF(g1, g2, nbins=30, range=(1.0, 10.0), norm="density").run()
            return [(r.count, x.results.count, 0.0), (r.rdf, x.results.rdf, 1e-5)]
        out["rdf_density"] = (ts.RDF(a, sel, nbins=30, range=(1.0, 10.0), norm="density"), rdf_density_ref)
    return {name: (analysis, _remembered((system, name), fn)) for name, (analysis, fn) in out.items()}


def check(result, reference_fn) -> None:
    for ours, ref, tol in reference_fn(result):
        ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
        assert ours.shape == ref.shape, (ours.shape, ref.shape)
        if tol == 0.0:
            np.testing.assert_array_equal(ours, ref)
        else:
            np.testing.assert_allclose(ours, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))
