"""Build the compiled kernels (Cython, ahead of time); everything else is in pyproject.toml.

Every ``*.pyx`` under ``src/trajscale`` becomes an extension module of the same dotted name.
Flags: ``-O3`` for speed, ``-ffp-contract=off`` so that no compiler fuses a multiply and an
add into one FMA on some machines and not others (results stay the same bits everywhere).
``TRAJSCALE_FUZZ_BUILD=1`` (with ``CC=clang``) adds ``-fsanitize=fuzzer-no-link``, so that a
fuzzer (``benchmarks/fuzz.py``) sees the coverage of the compiled decoders too; only
``benchmarks/fuzz.py`` builds that way, into a directory of its own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
NEEDS = ("trajscale's kernels are compiled when it is installed: a C compiler (gcc or clang) and the "
         "Python headers are needed (Debian/Ubuntu: apt-get install build-essential python3-dev)")


class BuildExt(build_ext):
    """build_ext that compiles the modules side by side, one per core (``-j``), and fails with one line
    naming what is missing when there is no working compiler."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self):
        from setuptools._distutils.ccompiler import new_compiler
        from setuptools._distutils.sysconfig import customize_compiler
        from setuptools._distutils.errors import CompileError, DistutilsExecError
        import tempfile
        cc = new_compiler()
        customize_compiler(cc)
        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp, "probe.c")
            probe.write_text('#include <Python.h>\nint main(void) { return 0; }\n')
            try:
                cc.compile([str(probe)], output_dir=tmp, include_dirs=[self._python_include()])
            except (CompileError, DistutilsExecError, OSError) as exc:
                sys.exit(f"error: {NEEDS} ({type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc})")
        # Cython's C is made here, once a compiler is known to work (and never for an sdist)
        translated = {ext.name: ext for ext in cythonize(self.extensions)}
        for ext in self.extensions:   # sources, and what a .pyx's "# distutils:" lines add; setuptools's own
            vars(ext).update(vars(translated[ext.name]))   # fields, set on these objects, are kept
        super().run()

    @staticmethod
    def _python_include() -> str:
        import sysconfig
        return sysconfig.get_paths()["include"]


#: Coverage counters for libFuzzer (atheris), in fuzzing builds only.
FUZZ_FLAGS = ["-fsanitize=fuzzer-no-link"] if os.environ.get("TRAJSCALE_FUZZ_BUILD") == "1" else []


def extensions() -> list[Extension]:
    import numpy as np
    mods = []
    for pyx in sorted((HERE / "src").rglob("*.pyx")):
        rel = pyx.relative_to(HERE / "src").with_suffix("")
        mods.append(Extension(".".join(rel.parts), [str(pyx.relative_to(HERE))],
                              include_dirs=[np.get_include()],
                              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                              extra_compile_args=["-O3", "-ffp-contract=off", "-g0", *FUZZ_FLAGS],
                              extra_link_args=FUZZ_FLAGS))
    return mods


def cythonize(mods: list[Extension]) -> list[Extension]:
    """The ``.pyx`` sources of ``mods`` translated to C (the directives every kernel is written for)."""
    from Cython.Build import cythonize as translate
    # CYTHON_CACHE_DIR set (make sets it, as it sets ccache): a .pyx translated before, with the same Cython,
    # options and included files, is taken from Cython's cache there (keyed by their contents), not translated
    # again; the C, and the build, are the same
    return translate(mods, language_level=3, nthreads=os.cpu_count() or 1,
                     cache=bool(os.environ.get("CYTHON_CACHE_DIR")), compiler_directives={
                         "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False})


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
