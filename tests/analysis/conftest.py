"""Executors the analysis tests share: a process pool and a Dask cluster of two workers, one per module."""

from __future__ import annotations

import pytest

import trajscale as ts


@pytest.fixture(scope="module")
def pool():
    with ts.make_executor("processes", 2) as ex:
        yield ex


@pytest.fixture(scope="module")
def dask_ex():
    pytest.importorskip("distributed")
    with ts.make_executor("dask", 2) as ex:
        yield ex
