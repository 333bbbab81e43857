"""Every member counted from a bucket as from a folder: the damaged mdCATH files of tests/ensemble/test_count.py
and its XTC files, uploaded to a real S3 server, give the same count on every entry point, each damaged member
refused with the same reason as from the local folder (the location aside; an empty object's reason also says
how to publish one)."""

from __future__ import annotations

import glob
import os

import pytest

import trajscale as ts
from tests.ensemble.test_count import MDCATH_KINDS, XTC_KINDS, check, damaged_mdcath, damaged_xtc
from trajscale.ml.ensemble import EnsembleDataset
from trajscale.ml.lagged_dataset import LaggedEnsembleDataset

pytestmark = pytest.mark.remote
BUCKET = "counted"


@pytest.fixture(scope="module")
def mdcath_files(tmp_path_factory) -> str:
    return damaged_mdcath(tmp_path_factory.mktemp("count-mdcath"))


@pytest.fixture(scope="module")
def xtc_files(tmp_path_factory) -> str:
    return damaged_xtc(tmp_path_factory.mktemp("count-xtc"))


def uploaded(s3_server, pattern: str, prefix: str) -> str:
    """The files ``pattern`` matches, uploaded under ``prefix``: the URL pattern."""
    client = s3_server.client()
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    for path in glob.glob(pattern):
        client.upload_file(path, BUCKET, f"{prefix}/{os.path.basename(path)}")
    return f"s3://{BUCKET}/{prefix}/{os.path.basename(pattern)}"


def reasons(refused, folder: str, url_folder: str) -> dict:
    """Each refusal's reason, the location aside; an empty file's alone in its words (an object's adds how to
    publish one: under a new name, then renamed)."""
    return {x.member.name: x.reason.replace(url_folder, folder) for x in refused if x.member.name != "empty"}


def test_the_count_and_the_reasons_from_a_bucket_are_the_folders(s3_env, mdcath_files, xtc_files):
    from MDAnalysisTests.datafiles import PSF

    for pattern, kinds, topology in ((mdcath_files, MDCATH_KINDS, None), (xtc_files, XTC_KINDS, PSF)):
        folder = os.path.dirname(pattern)
        url = uploaded(s3_env, pattern, os.path.basename(folder))
        url_folder = url.rsplit("/", 1)[0]
        here = ts.run(ts.RMSD(select="name CA"), ts.Ensemble.from_glob(pattern, topology=topology))
        ens = ts.Ensemble.from_glob(url, topology=topology)
        assert ens.names == ts.Ensemble.from_glob(pattern, topology=topology).names
        there = ts.run(ts.RMSD(select="name CA"), ens)
        check(ens.names, there.names, {x.member.name: x.reason for x in there.refused}, kinds)
        assert reasons(there.refused, folder, url_folder) == reasons(here.refused, folder, folder)
        for dataset in (EnsembleDataset(ens),
                        LaggedEnsembleDataset(ens, 2)):
            assert reasons(dataset.refused, folder, url_folder) == reasons(here.refused, folder, folder)
            assert len(dataset.names) + len(dataset.refused) == len(ens)
