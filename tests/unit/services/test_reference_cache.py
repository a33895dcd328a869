"""The cache of built references: a build drops the older builds of the same reference."""

from __future__ import annotations

from calmon.services.windows.reference_cache import ReferenceCache


def test_a_build_drops_the_older_builds_of_the_same_reference() -> None:
    """A key that comes back (change records deleted by a scan) must not find a build older
    than the last one."""
    cache = ReferenceCache()
    for key in [(1, "fixed", "a", "*"), (1, "fixed", "a", "s"), (1, "trailing", "a"), (2, "fixed")]:
        cache.put(key, None)
    family, key = (1, "fixed"), (1, "fixed", "b")
    cache.forget(lambda old: old[: len(family)] == family and old[: len(key)] != key)
    cache.put((*key, "*"), None)
    assert cache.get((1, "fixed", "a", "*")) == (False, None)
    assert cache.get((1, "fixed", "a", "s")) == (False, None)
    assert cache.get((1, "trailing", "a")) == (True, None)
    assert cache.get((2, "fixed")) == (True, None)
    assert cache.get((1, "fixed", "b", "*")) == (True, None)
