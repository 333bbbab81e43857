

def fork_here() -> str:
    """``"fork"``, for a test of forked workers (its analysis is registered in this process only), marked
    ``fork``: tests/alone.py runs it in a process that may fork (a test process may run threads an earlier test
    left, Dask's offload thread, and a fork asked for there is refused: tests/executors/test_auto.py tests that
    refusal), so a refusal here is the test's failure, never a skip."""
    import pytest

    from trajscale.pools import fork_refusal

    why = fork_refusal()
    if why is not None:
        pytest.fail(f"this test's process cannot fork ({why}): mark the test `fork`", pytrace=False)
    return "fork"
