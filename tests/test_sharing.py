"""The root prepares, then shares: one protocol for runs (``engine.share``) and converts (``convert.pool.on_root``),
the same Ctrl-C rules for both.  The groups here are two processes' halves of a broadcast played in one process."""

from __future__ import annotations

import pickle

import pytest

from trajscale.errors import InputFileError
from trajscale.sharing import CommGroup, share


class Root:
    """Rank 0 of a group of two: what it broadcasts is kept for the other rank."""

    is_root, spmd = True, True

    def __init__(self) -> None:
        self.sent = []

    def broadcast(self, obj):
        self.sent.append(obj)
        return obj


class Other:
    """Rank 1: receives what rank 0 sent."""

    is_root, spmd = False, True

    def __init__(self, sent) -> None:
        self.sent = sent

    def broadcast(self, obj):
        assert obj is None
        return pickle.loads(pickle.dumps(self.sent.pop(0)))   # a copy, as MPI's broadcast gives


def _both(make):
    root = Root()
    outcomes = []
    for group in (root, Other(root.sent)):
        try:
            outcomes.append(("value", share(group, make, "prepare")))
        except BaseException as exc:   # noqa: BLE001 - each rank's ending, compared below
            outcomes.append(("raised", exc))
    return outcomes


def test_the_value_reaches_every_rank():
    assert _both(lambda: 42) == [("value", 42), ("value", 42)]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(143)])
def test_an_interrupt_on_the_root_is_an_interrupt_on_every_rank(interrupt):
    def make():
        raise interrupt

    (k0, e0), (k1, e1) = _both(make)
    assert k0 == k1 == "raised" and type(e0) is type(e1) is type(interrupt)


def test_a_user_error_is_raised_everywhere_and_printed_once():
    def make():
        raise InputFileError("a.h5md", "no such file")

    (_, e0), (_, e1) = _both(make)
    assert isinstance(e0, InputFileError) and isinstance(e1, InputFileError)
    assert not getattr(e0, "reported_elsewhere", False) and e1.reported_elsewhere


def test_a_bug_on_the_root_is_named_on_the_others():
    def make():
        raise ZeroDivisionError("boom")

    (_, e0), (_, e1) = _both(make)
    assert isinstance(e0, ZeroDivisionError)
    assert isinstance(e1, RuntimeError) and "rank 0 failed to prepare: ZeroDivisionError('boom')" in str(e1)


def test_convert_and_the_engine_share_through_the_one_protocol():
    from trajscale import engine
    from trajscale.convert import pool

    assert engine.share is share
    assert CommGroup(None).is_root and not CommGroup(None).spmd
    assert pool.on_root(None, lambda: "prepared") == "prepared"


def test_the_root_owes_its_first_share_and_a_share_followed_by_another():
    """An interrupt that ends the root while the others wait in a share it owes is what they receive; a share
    pays the debt, unless another follows it (``then_share``); an error other than an interrupt sends nothing."""
    from trajscale.sharing import owe_first_share, share_interruption

    root = Root()
    owe_first_share(root)
    owe_first_share(root)   # (said twice: still one share owed)
    share_interruption(SystemExit(143))
    assert [type(x) for x in root.sent] == [SystemExit] and root.sent[0].code == 143
    share_interruption(SystemExit(143))   # owed once: nothing more is sent
    assert len(root.sent) == 1

    root = Root()
    owe_first_share(root)
    assert share(root, lambda: "job", "prepare", then_share=True) == "job"
    share_interruption(KeyboardInterrupt())   # between the job's share and the next one
    assert root.sent[0] == "job" and isinstance(root.sent[1], KeyboardInterrupt)

    root = Root()
    owe_first_share(root)
    share(root, lambda: "round", "plan")
    share_interruption(SystemExit(143))   # paid: the others' next collective is not a share
    assert root.sent == ["round"]
    owe_first_share(root)
    share_interruption(InputFileError("x.h5md", "no such file"))
    share_interruption(SystemExit(143))
    assert root.sent == ["round"]
