"""``simulate.derived_store``: derived numbers computed once per machine, recomputed when the
arguments, our source or the libraries change, and read back exactly."""

import pytest

from simulate import derived_store
from simulate.incremental.head_training import derived_plateaus, predicted_times
from theory.incremental.heads import HeadSetting


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGEWISE_CACHE_DIR", str(tmp_path))
    return tmp_path / "derived"


def test_a_result_is_computed_once_per_arguments_and_source(cache, monkeypatch):
    calls = []

    @derived_store.on_disk(decode=tuple)
    def times(a: float, b: int) -> tuple:
        calls.append((a, b))
        return (a / 3, None, float(b))

    assert times(1.0, 2) == (1 / 3, None, 2.0)
    assert times(1.0, 2) == (1 / 3, None, 2.0)  # read back, bit for bit
    assert calls == [(1.0, 2)]
    times(1.0 + 2**-52, 2)  # one ulp: another entry
    assert len(calls) == 2
    monkeypatch.setattr(derived_store, "package_digest", lambda: "edited")
    times(1.0, 2)
    assert len(calls) == 3
    for path in cache.iterdir():  # entries cut by a kill are computed again
        path.write_text('{"val')
    assert times(1.0, 2) == (1 / 3, None, 2.0) and len(calls) == 4


def test_heads_gd_stage_numbers_read_back_equal_to_the_sympy_ones(cache):
    setting = HeadSetting(heads=2, blocks=(1, 1), window=5)
    for fn, args in ((derived_plateaus, (setting,)), (predicted_times, (setting, 0.01))):
        stored = fn.__wrapped__  # under the per-process cache
        computed = stored(*args)
        assert any(cache.iterdir())
        assert stored(*args) == computed == stored.__wrapped__(*args)
