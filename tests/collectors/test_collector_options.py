from __future__ import annotations

import pytest

from workbench.collectors import Collector, CollectorOptions


@pytest.mark.parametrize("kwargs, words", [
    ({"profile_start": -1}, "profile_start"),
    ({"profile_length": 0}, "profile_length"),
    ({"profile_repeat": -2}, "profile_repeat"),
    ({"profile_repeat": 2, "profile_every": 3}, "profile_every"),
    ({"profile_ranks": (0, -1)}, "profile_ranks"),
    ({"activities": ("cpu", "tpu")}, "activities"),
    ({"profile_start": 1.5}, "profile_start"),
])
def test_bad_options_raise_value_error_naming_the_option(kwargs, words):
    with pytest.raises(ValueError, match=words):
        CollectorOptions(**kwargs)
    with pytest.raises(ValueError, match=words):
        Collector("unused", **kwargs)


def test_options_are_keyword_only_with_slots():
    with pytest.raises(TypeError):
        CollectorOptions(5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Collector("p", 5)  # type: ignore[misc]
    assert not hasattr(CollectorOptions(), "__dict__")


def test_windows_default_and_cut_to_the_loop():
    o = CollectorOptions()
    assert o.windows() == [(5, 7)]
    assert o.windows(5) == []            # loop shorter than the start: no window
    assert o.windows(7) == [(5, 6)]
    o = CollectorOptions(profile_start=0, profile_length=2, profile_repeat=3, profile_every=4)
    assert o.windows() == [(0, 1), (4, 5), (8, 9)]
    assert [s for s in range(12) if o.window_of(s)] == [0, 1, 4, 5, 8, 9]
    assert CollectorOptions(profile_repeat=0).window_of(5) is None


def test_profile_ranks():
    o = CollectorOptions(profile_ranks=[1, 3])
    assert o.profile_ranks == (1, 3)
    assert o.profiles_rank(3) and not o.profiles_rank(0)


def test_compile_config_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_COMPILE_CONFIG", str(tmp_path / "c.toml"))
    assert CollectorOptions().compile_config == str(tmp_path / "c.toml")
