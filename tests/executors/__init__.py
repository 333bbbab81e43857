


def fork_or_skip() -> str:
    """``"fork"``, for a test of forked workers (its analysis is registered in this process only), where this
    process may fork: a test process may run threads an earlier test left (Dask's offload thread), and a fork
    asked for there is refused (tests/executors/test_auto.py tests that refusal)."""
    import pytest

    from trajscale.pools import fork_refusal

    why = fork_refusal()
    if why is not None:
        pytest.skip(f"this test process cannot fork: {why}")
    return "fork"
